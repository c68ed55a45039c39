"""Small arrays landed in C, straight from their mailbox slot (`Mailboxes.land`, `exchange`,
native/reduce.c): the result equals numpy's bit for bit for every op and dtype it computes, and any
other message comes back as it arrived, with the target left alone."""

import numpy as np
import pytest

from playground.comm import mailbox, wire
from playground.comm.shm import ShmChannels
from playground.comm.shm_transport import _LAND_DTYPES, _LAND_OPS, ShmTransport

UFUNCS = [np.add, np.multiply, np.maximum, np.minimum]
DTYPES = [np.float32, np.float64, np.int32, np.int64]


def _values(dtype, count: int, seed: int) -> np.ndarray:
    """Ordinary values and the awkward ones: signed zeros, NaN, infinities, ties, integer overflow."""
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.floating):
        special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 3.5], dtype)
        x = rng.normal(0, 1e3, count).astype(dtype)
    else:
        info = np.iinfo(dtype)
        special = np.array([0, -1, 1, info.max, info.min, 7, info.max // 3, -5], dtype)
        x = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
    picks = rng.integers(0, len(special), count)
    mask = rng.random(count) < 0.5
    x[mask] = special[picks[mask]]
    return x


def _code(ufunc, dtype) -> int:
    return _LAND_OPS[ufunc] * 8 + (_LAND_DTYPES[np.dtype(dtype)] if ufunc is not None else 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ufunc", [*UFUNCS, None])
@pytest.mark.parametrize("count", [1, 3, 1000])
def test_land_equals_numpy_bit_for_bit(two, ufunc, dtype, count):
    a, b = two
    for base_given in (False, True):
        msg = _values(dtype, count, seed=count)
        target = _values(dtype, count, seed=count + 1)
        base = _values(dtype, count, seed=count + 2) if base_given else None
        head = wire.encode_header(0, 5, wire.KIND_INLINE, target.dtype, target.shape)
        if ufunc is None:
            want = msg.copy()
        else:
            with np.errstate(all="ignore"):
                want = ufunc(target if base is None else base, msg)
        assert a.try_send(1, head, msg)
        assert b.land(1000, 0, 0, 0, head, target, _code(ufunc, dtype), base) is True
        assert target.tobytes() == want.tobytes()  # bit for bit: NaNs, signed zeros, wrap-around
        assert b.receive(0) is None  # the slot was freed


def test_land_returns_any_other_message_and_leaves_the_target_alone(tmp_path):
    boxes = [mailbox.open_mailboxes(str(tmp_path), r, 3) for r in range(3)]
    try:
        x = np.arange(4, dtype=np.float32)
        target = np.full(4, 9.0, np.float32)
        head = wire.encode_header(0, 5, wire.KIND_INLINE, target.dtype, target.shape)
        other_tag = wire.encode_header(0, 6, wire.KIND_INLINE, target.dtype, target.shape)
        from_rank_2 = wire.encode_header(2, 5, wire.KIND_INLINE, target.dtype, target.shape)
        code = _code(np.add, np.float32)
        assert boxes[0].try_send(1, other_tag, x)  # another tag
        assert boxes[0].try_send(1, head, x[:3])  # the header's length, but too short
        assert boxes[2].try_send(1, from_rank_2, x)  # another sender
        got = [boxes[1].land(1000, 0, 0, 0, head, target, code, None) for _ in range(3)]
        assert sorted(got) == sorted(
            [other_tag + x.tobytes(), head + x[:3].tobytes(), from_rank_2 + x.tobytes()]
        )
        assert np.all(target == 9.0)
        assert boxes[1].land(0, 0, 0, 0, head, target, code, None) is None  # nothing left
        assert boxes[1].land(20, 0, 0, 0, head, target, code, None) is None  # and none came
    finally:
        for b in boxes:
            b.close()


def test_exchange_posts_then_lands_or_says_what_it_found(two):
    a, b = two
    buf_a, buf_b = np.array([1, 2], np.int64), np.array([10, 20], np.int64)
    head = {r: wire.encode_header(r, 3, wire.KIND_INLINE, buf_a.dtype, buf_a.shape) for r in (0, 1)}
    code = _code(np.add, np.int64)
    assert a.exchange(1, head[0], buf_a, 20, 0, 0, 1, head[1], buf_a, code) is False  # posted, nothing came
    assert b.exchange(0, head[1], buf_b, 1000, 0, 0, 0, head[0], buf_b, code) is True  # posted and landed
    assert b.receive(0) is None
    assert a.land(1000, 0, 0, 1, head[1], buf_a, code, None) is True
    assert buf_a.tolist() == buf_b.tolist() == [11, 22]  # each sent its own before reducing
    while a.try_send(1, b"fill"):
        pass
    assert a.exchange(1, head[0], buf_a, 20, 0, 0, 1, head[1], buf_a, code) is None  # no room: not posted
    assert buf_a.tolist() == [11, 22]


def test_a_target_that_is_not_writable_and_contiguous_is_refused_before_anything_is_taken(two):
    a, b = two
    head = wire.encode_header(0, 5, wire.KIND_INLINE, np.dtype(np.float64), (4,))
    assert a.try_send(1, head, np.ones(4))
    strided = np.zeros(8)[::2]
    with pytest.raises((ValueError, BufferError)):
        b.land(1000, 0, 0, 0, head, strided, _code(np.add, np.float64), None)
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        b.land(1000, 0, 0, 0, head, frozen, _code(np.add, np.float64), None)
    assert b.receive(0) == head + np.ones(4).tobytes()  # still there


def test_the_transport_lands_only_what_c_computes_and_receives_the_rest(tmp_path):
    boxes = [mailbox.open_mailboxes(str(tmp_path), r, 2) for r in range(2)]
    ts = [ShmTransport(r, ShmChannels(r, str(tmp_path)), boxes[r], 32 * 1024) for r in range(2)]
    try:
        x = np.arange(6, dtype=np.float32)
        for ufunc, dtype in [(np.add, np.float32), (np.subtract, np.float32), (np.add, np.uint8)]:
            y = x.astype(dtype)
            target = np.ones(6, dtype)
            assert ts[0].send(1, 4, y) is not None
            got = ts[1].land(0, 4, target, ufunc, None, 1000)
            if (ufunc, np.dtype(dtype)) == (np.add, np.dtype(np.float32)):
                assert got is True and target.tolist() == (1 + x).tolist()
            else:  # not computed in C: the message, as receive() gives it
                assert got.src == 0 and got.tag == 4 and got.array().tolist() == y.tolist()
                assert np.all(target == 1)
        big = np.ones(10_000, np.float64)  # 80 KB: through the ring, never landed in C
        assert ts[0].send(1, 4, big) is not None
        got = ts[1].land(0, 4, np.zeros_like(big), np.add, None, 1000)
        assert got is not True and got.array().nbytes == big.nbytes
        got.release()
    finally:
        for t in ts:
            t.close()


def test_the_calibrations_shm_size_ranges_change_where_an_array_stops_fitting_a_slot(tmp_path):
    """calibrate fits the shm transport's costs in two size ranges split where its path changes: the
    largest 1-D array a mailbox slot carries inline, and one byte more through the sender's ring."""
    from playground.comm.shm import SHM_MIN_BYTES
    from playground.comm.shm_transport import RingMessage, _InlineMessage
    from playground.commands.calibrate import BOUNDS

    edge = BOUNDS["shm"][1]
    boxes = [mailbox.open_mailboxes(str(tmp_path), r, 2) for r in range(2)]
    ts = [ShmTransport(r, ShmChannels(r, str(tmp_path)), boxes[r], SHM_MIN_BYTES) for r in range(2)]
    try:
        for nbytes, kind in [(edge - 1, _InlineMessage), (edge, RingMessage)]:
            assert ts[0].send(1, 4, np.full(nbytes, 7, np.uint8)) is not None
            got = ts[1].receive(1000)
            assert type(got) is kind and got.array().nbytes == nbytes and int(got.array()[-1]) == 7
            got.release()
    finally:
        for t in ts:
            t.close()
