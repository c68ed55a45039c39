"""The training data: the lecture's own text as UTF-8 bytes (one token per byte, 256 symbols), and
the batch sampler every rank runs identically.

The text ships inside the package (docs/lecture-p4-computer-systems.txt is a link to it), so
training works from a plain `pip install`. For step s, the global batch is `batch` windows of
context + 1 bytes at offsets drawn from `np.random.default_rng([seed, s])`: any rank computes
any step's batch without state carried from the steps before, and every rank draws the same
offsets. Rank r of N takes rows [r B/N, (r+1) B/N); inputs are a window's first `context` bytes
and targets its last `context` (the next byte of each).
"""

from dataclasses import dataclass
from importlib.resources import files

import numpy as np

from playground.core.errors import ParamError

LECTURE_TEXT = "lecture-p4-computer-systems.txt"


def lecture_bytes() -> np.ndarray:
    """The lecture's text as a uint8 array of its UTF-8 bytes."""
    raw = (files("playground.transformer") / LECTURE_TEXT).read_bytes()
    return np.frombuffer(raw, dtype=np.uint8)


@dataclass(frozen=True, eq=False)
class BatchSampler:
    data: np.ndarray
    context: int
    batch: int
    seed: int = 0

    def __post_init__(self):
        if self.context + 1 > len(self.data):
            raise ParamError(
                "context",
                f"must be < the text's length {len(self.data)} bytes (a window is context + 1), got {self.context}",
            )
        if self.batch < 1:
            raise ParamError("batch", f"must be >= 1, got {self.batch}")

    def global_batch(self, step: int) -> np.ndarray:
        """(batch, context + 1) int64 windows of step `step`."""
        rng = np.random.default_rng([self.seed, step])
        offsets = rng.integers(0, len(self.data) - self.context, size=self.batch)
        return self.data[offsets[:, None] + np.arange(self.context + 1)].astype(np.int64)

    def rank_batch(self, step: int, rank: int = 0, ranks: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets), each (batch / ranks, context): rank `rank`'s rows of the global batch."""
        if self.batch % ranks:
            raise ParamError("batch", f"the global batch {self.batch} must be divisible by the {ranks} ranks")
        rows = self.batch // ranks
        windows = self.global_batch(step)[rank * rows : (rank + 1) * rows]
        return windows[:, :-1], windows[:, 1:]
