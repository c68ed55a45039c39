"""Pin the BLAS (OpenBLAS under numpy here) to n threads, from inside a process that is running.

N ranks on C cores each with a BLAS pool of C threads run N x C threads that preempt each other
in the middle of every matrix product. The usual fix, OPENBLAS_NUM_THREADS=1 in the environment,
only works if it is set before the library is loaded, and our ranks are forked from a launcher
that imported numpy long before. threadpoolctl finds the BLAS libraries loaded in this process
and calls their own setter (openblas_set_num_threads, mkl_set_num_threads, ...), which works at
any time, in a forked child too.
"""

from threadpoolctl import threadpool_info, threadpool_limits


def pin_blas_threads(n: int = 1) -> threadpool_limits:
    """From now on every BLAS library loaded in this process uses `n` threads. A rank calls it
    once at start; `with pin_blas_threads(1): ...` pins for the block only and then restores."""
    return threadpool_limits(limits=n, user_api="blas")


def blas_threads() -> int:
    """The largest thread count of the BLAS libraries loaded in this process (0 if none)."""
    return max((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"), default=0)
