"""Stand-in backward compute: real CPU work that releases the GIL, sized in milliseconds.

Why not sleep: a sleeping "compute" overlaps with anything and proves nothing; the point of
the overlap experiment is that compute and communication compete for real resources. Why
not a matmul: OpenBLAS would start its own threads on every rank and, with ranks outnumbering
cores, measure scheduler noise. A numpy ufunc (np.sin) over a block that fits in cache is
single-threaded, CPU-bound and runs with the GIL released, so a communication thread in the
same process can run beside it, like a CUDA stream beside the compute stream.
"""

import time

import numpy as np

BLOCK_ELEMENTS = 16 * 1024  # 64 KiB of float32: stays in L1/L2, so the work is arithmetic


class Burner:
    """Does `units` of work; `calibrate` measures how many units make a millisecond here."""

    def __init__(self):
        self._x = np.linspace(0.0, 1.0, BLOCK_ELEMENTS, dtype=np.float32)
        self._y = np.empty_like(self._x)

    def burn(self, units: int) -> None:
        for _ in range(units):
            np.sin(self._x, out=self._y)

    def estimate_units_per_ms(self, target_s: float = 0.05) -> float:
        """A quick first estimate: double the work until one round takes `target_s`."""
        units = 16
        while True:
            t0 = time.perf_counter()
            self.burn(units)
            dt = time.perf_counter() - t0
            if dt >= target_s or units > 1 << 24:
                return units / (dt * 1000.0)
            units *= 2

    def measure_units_per_ms(self, units: int) -> float:
        """Units per millisecond over one round of `units`. Called by every rank at once, this
        includes the contention of the real run (ranks sharing cores), which a best-of-N round
        on an idle core would hide."""
        t0 = time.perf_counter()
        self.burn(units)
        return units / ((time.perf_counter() - t0) * 1000.0)
