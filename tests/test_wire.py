import numpy as np
import pytest

from playground.comm import wire


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 1, 7)])
def test_header_roundtrip(dtype, shape):
    h = wire.encode_header(63, -10, wire.KIND_ARRAY, np.dtype(dtype), shape)
    assert wire.decode_header(h) == (63, -10, wire.KIND_ARRAY, np.dtype(dtype), shape)


def test_malformed_header_is_rejected():
    h = wire.encode_header(1, 2, wire.KIND_ARRAY, np.dtype("f4"), (3,))
    with pytest.raises(ValueError):
        wire.decode_header(h[:-1])
    with pytest.raises(ValueError):
        wire.decode_header(b"xx")
