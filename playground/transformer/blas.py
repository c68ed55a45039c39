"""The BLAS under the matrix products: how many threads it runs (a training rank pins it to one) and
which library the native kernels call (numpy's own OpenBLAS, or MKL).

Threads. N ranks on C cores each with a BLAS pool of C threads run N x C threads that preempt each
other in the middle of every matrix product. The usual fix, OPENBLAS_NUM_THREADS=1 in the
environment, only works if it is set before the library is loaded, and our ranks are forked from a
launcher that imported numpy long before. threadpoolctl finds the BLAS libraries loaded in this
process and calls their own setter (openblas_set_num_threads, mkl_set_num_threads, ...), which works
at any time, in a forked child too.

Which library. The products are most of a training step, and at this model's shapes numpy's
OpenBLAS does them slower than MKL, the BLAS torch's CPU build links (`bench compute` measures
both: its OpenBLAS zeroes every output before a product, and splits a 512-deep product in two). The native kernels (fused.py, native/gemm.c) call MKL's gemm when the optional `mkl`
package is installed (`pip install 'playground[mkl]'`), else numpy's own library; PLAYGROUND_BLAS
picks one (`numpy` or `mkl`; `auto`, the default: MKL if installed). The library is opened on the
first product, with as many threads as numpy's BLAS has then (so a rank's pin carries over).
"""

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from threadpoolctl import threadpool_info, threadpool_limits

from playground.core.errors import UsageError
from playground.core.native import load_native

ENVIRONMENT = "PLAYGROUND_BLAS"
# MKL without its OpenMP layer: a rank pins its BLAS to one thread anyway, and Intel's OpenMP runtime
# registers every process in /dev/shm (__KMP_REGISTERED_LIB_<pid>_<uid>), a file that a rank leaving
# by os._exit or SIGKILL never removes. MKL_THREADING_LAYER set beforehand wins.
SEQUENTIAL = "SEQUENTIAL"
CHOICES = ("auto", "numpy", "mkl")


def pin_blas_threads(n: int = 1) -> threadpool_limits:
    """From now on every BLAS library loaded in this process uses `n` threads. A rank calls it
    once at start; `with pin_blas_threads(1): ...` pins for the block only and then restores."""
    return threadpool_limits(limits=n, user_api="blas")


def blas_threads() -> int:
    """The largest thread count of the BLAS libraries loaded in this process (0 if none)."""
    return max((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"), default=0)


@dataclass(frozen=True)
class BoundBlas:
    """The library the native kernels' products call: its name, version, file and CBLAS symbol."""

    name: str  # "MKL" or numpy's library's (threadpoolctl's internal_api, e.g. "openblas")
    version: str
    path: str
    symbol: str

    def describe(self) -> str:
        return f"{self.name} {self.version} ({os.path.basename(self.path)})"


_bound: list[BoundBlas | None] = []  # [] until the first product binds one


def bound_blas() -> BoundBlas | None:
    """The library the native products call, opened and bound on the first call (PLAYGROUND_BLAS);
    None if none could be bound (then they are numpy's matmul)."""
    if not _bound:
        _bound.append(bind_blas(os.environ.get(ENVIRONMENT) or "auto"))
    return _bound[0]


def bind_blas(choice: str) -> BoundBlas | None:
    """Bind the native products to `choice`'s library (see the module doc) and return it; `mkl`
    without the package is a UsageError naming the variable."""
    if choice not in CHOICES:
        raise UsageError(f"{ENVIRONMENT}={choice!r}: allowed: {', '.join(CHOICES)}", field=ENVIRONMENT)
    native = load_native()
    mkl = _mkl_library() if choice != "numpy" else None
    if choice == "mkl" and mkl is None:
        raise UsageError(
            f"{ENVIRONMENT}=mkl: the mkl package is not installed (pip install mkl)", field=ENVIRONMENT
        )
    threads = blas_threads() or 1
    if mkl is not None:
        path, version = mkl
        os.environ.setdefault("MKL_THREADING_LAYER", SEQUENTIAL)  # read when MKL is first opened
        symbol = native.blas_bind(path)
        if symbol:
            threadpool_limits(limits=threads, user_api="blas")  # MKL's own default: every core
            return _remember(BoundBlas("MKL", version, path, symbol))
    for pool in threadpool_info():
        if pool["user_api"] == "blas" and pool["internal_api"] != "mkl":
            symbol = native.blas_bind(pool["filepath"])
            if symbol:
                return _remember(
                    BoundBlas(pool["internal_api"], pool["version"] or "", pool["filepath"], symbol)
                )
    return _remember(None)


def _remember(blas: BoundBlas | None) -> BoundBlas | None:
    _bound[:] = [blas]
    return blas


def mkl_installed() -> bool:
    """Whether the optional `mkl` package (the `mkl` extra) is installed."""
    return _mkl_library() is not None


def _mkl_library() -> tuple[str, str] | None:
    """(path of libmkl_rt, version) of the installed `mkl` package, or None."""
    try:
        dist = importlib.metadata.distribution("mkl")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if (
            file.name.startswith("libmkl_rt.so")
            or file.name.startswith("libmkl_rt.")
            and file.suffix == ".dylib"
        ):
            return str(Path(str(dist.locate_file(file))).resolve()), dist.version
    return None
