"""The native products (native/gemm.c through transformer/blas.py's bound BLAS): numpy's matmul on any
view the BLAS can read in place (transposes, slices, batches of matrices, a strided output), numpy
itself on the rest, a linear layer's bias and residual added by the product, on numpy's OpenBLAS
and on MKL when it is installed; a BLAS that cannot be had is one clear error."""

import os
import subprocess
import sys

import numpy as np
import pytest
from tools import need

from playground.core.errors import UsageError
from playground.transformer import blas, fused, layers

CHOICES = ["numpy"] + (["mkl"] if blas._mkl_library() else [])
TOL = {"float32": 1e-5, "float64": 1e-13}


@pytest.fixture(params=CHOICES)
def bound(request):
    before = blas.bound_blas()
    yield blas.bind_blas(request.param)
    blas.bind_blas("auto" if before is None or before.name == "MKL" else "numpy")


def rand(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def close(a, b, dtype):
    return np.max(np.abs(a - b)) <= TOL[dtype] * max(1.0, np.max(np.abs(b)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_products_on_views_equal_numpys(bound, dtype):
    assert bound is not None
    a, b = rand(9, 7, dtype=dtype), rand(7, 5, dtype=dtype, seed=1)
    wide = rand(12, 20, dtype=dtype, seed=2)
    cases = [
        (a, b),
        (a.T.copy().T, b),  # a column-major a
        (rand(7, 9, dtype=dtype).T, rand(5, 7, dtype=dtype).T),  # both transposed
        (wide[1:10, 3:10], b),  # a slice: rows 20 apart
        (rand(2, 3, 9, 7, dtype=dtype), rand(2, 3, 7, 5, dtype=dtype)),  # a batch of 2 x 3
        (
            rand(2, 9, 3, 7, dtype=dtype).transpose(0, 2, 1, 3),
            rand(2, 3, 5, 7, dtype=dtype).transpose(0, 1, 3, 2),
        ),
        (rand(4, 9, 7, dtype=dtype), b),  # rows of a batch against one matrix
        (a[::2, ::2], b[::2]),  # no unit stride: numpy's own
    ]
    for k, (x, y) in enumerate(cases):
        assert close(fused.matmul(x, y), np.matmul(x, y), dtype)
        if x.ndim == y.ndim:  # read in place by the BLAS, all but the last
            in_place = fused._C.matmul(x, y, np.empty_like(np.matmul(x, y)))
            assert in_place == (k < len(cases) - 1)
    out = np.zeros((9, 8), dtype)
    fused.matmul(a, b, out=out[:, 2:7])  # into a strided view
    assert close(out[:, 2:7], a @ b, dtype) and not out[:, :2].any() and not out[:, 7:].any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_linear_layer_adds_bias_and_residual_with_the_product(bound, dtype):
    x, w, bias = rand(2, 5, 6, dtype=dtype), rand(6, 4, dtype=dtype, seed=1), rand(4, dtype=dtype, seed=2)
    res = rand(2, 5, 4, dtype=dtype, seed=3)
    assert close(fused.linear_forward(x, w, bias), layers.linear_forward(x, w, bias), dtype)
    assert close(fused.linear_forward(x, w, bias, residual=res), x @ w + bias + res, dtype)
    dw, db = np.empty_like(w), np.empty_like(bias)
    dw_np, db_np = np.empty_like(w), np.empty_like(bias)
    dx = fused.linear_backward(res, x, w, dw, db)
    assert close(dx, layers.linear_backward(res, x, w, dw_np, db_np), dtype)
    assert close(dw, dw_np, dtype) and db.tobytes() == db_np.tobytes()


def test_a_blas_that_cannot_be_had_is_one_clear_error(monkeypatch):
    with pytest.raises(UsageError, match="PLAYGROUND_BLAS='openblas': allowed: auto, numpy, mkl"):
        blas.bind_blas("openblas")
    monkeypatch.setattr(blas, "_mkl_library", lambda: None)
    with pytest.raises(
        UsageError, match=r"PLAYGROUND_BLAS=mkl: the mkl package is not installed \(pip install mkl\)"
    ):
        blas.bind_blas("mkl")
    assert blas.bound_blas() is not None  # the binding before is kept


def test_a_process_on_mkl_that_leaves_by_os_exit_leaves_nothing_in_dev_shm():
    """MKL runs its sequential layer: Intel's OpenMP runtime, which registers each process in
    /dev/shm and removes the file only at a normal exit, is not loaded."""
    need(blas._mkl_library() is not None, "the mkl package is not installed (pip install 'playground[mkl]')")
    code = (
        "import os, numpy as np\n"
        "from playground.transformer import blas, fused\n"
        "assert blas.bind_blas('mkl').name == 'MKL'\n"
        "a = np.ones((256, 256), np.float32)\n"
        "fused.matmul(a, a)\n"
        "print(os.getpid(), flush=True)\n"
        "os._exit(0)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MKL_THREADING_LAYER"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    pid = proc.stdout.strip()
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"__KMP_REGISTERED_LIB_{pid}_")]
