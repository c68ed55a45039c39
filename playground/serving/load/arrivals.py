"""When requests arrive, and what they ask: Poisson arrivals (or a trace), prompts from the lecture.

Poisson arrivals at rate lambda are independent exponential gaps of mean 1/lambda (the lecture's
"random arrivals", what M/M/1 and M/D/1 assume, what vLLM's serving benchmark sends). A trace is a
file of arrival times in seconds, one a line, replayed as it is (scaled to each rate of a sweep
by its mean gap). Prompts are slices of the lecture's text (the model's own language), a `long`
share of them `long_prompt_tokens` long and the rest `prompt_tokens`, each with its own start so
that no prefix is shared.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from playground.core.errors import ParamError


@dataclass(frozen=True)
class Workload:
    """What each request asks: its prompt's length and the tokens it generates."""

    prompt_tokens: int = 32
    output_tokens: int = 32
    long_prompt_tokens: int = 0  # 0: no long prompts
    long_share: float = 0.0  # of the requests, drawn at random

    def __post_init__(self):
        for name in ("prompt_tokens", "output_tokens"):
            if getattr(self, name) < 1:
                raise ParamError(f"--{name.replace('_', '-')}", f"must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.long_share <= 1:
            raise ParamError("--long-share", f"must be in [0, 1], got {self.long_share}")

    @property
    def longest_tokens(self) -> int:
        return max(self.prompt_tokens, self.long_prompt_tokens) + self.output_tokens


def poisson_arrivals_s(rate_per_s: float, num_requests: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times from 0: cumulative exponential gaps of mean 1 / rate."""
    return np.cumsum(rng.exponential(1.0 / rate_per_s, num_requests)) - 0.0


def read_trace_s(path: Path) -> np.ndarray:
    """Arrival times (s), one a line, sorted, from 0."""
    try:
        times = np.sort(np.array([float(x) for x in path.read_text().split()]))
    except (OSError, ValueError) as e:
        raise ParamError("--trace", f"{path}: a file of arrival times in seconds, one a line ({e})") from None
    if len(times) < 2:
        raise ParamError("--trace", f"{path}: needs at least 2 arrival times")
    return times - times[0]


def scaled_trace_s(trace_s: np.ndarray, rate_per_s: float, num_requests: int) -> np.ndarray:
    """The trace's first `num_requests` gaps (cycled) scaled so their mean rate is `rate_per_s`."""
    gaps = np.diff(trace_s)
    gaps = np.resize(gaps, num_requests)
    return (
        np.cumsum(gaps * (len(gaps) / gaps.sum() / rate_per_s)) if gaps.sum() > 0 else np.zeros(num_requests)
    )


def prompts(workload: Workload, num_requests: int, text: bytes, rng: np.random.Generator) -> list[list[int]]:
    """Token ids (bytes) of each request's prompt: a slice of `text` at a random start."""
    out = []
    for _ in range(num_requests):
        long = workload.long_prompt_tokens and rng.random() < workload.long_share
        n = workload.long_prompt_tokens if long else workload.prompt_tokens
        start = int(rng.integers(0, max(1, len(text) - n)))
        out.append(list(text[start : start + n]))
    return out
