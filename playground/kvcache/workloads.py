"""Built-in workloads of the lecture (section 4.5, 4.6, exercise 10), the KV data clients write,
and the prompts a served model reads.

KV data is a pure function of (key, position), so a client can check a read without keeping a
copy, and a sequence that was preempted and recreated writes exactly the same values. Every
value is a small integer stored as float32, hence exact, and the columns differ per key, per
position and per channel, so a slot mixed up with another is always caught. Prompts are runs of
the lecture's own bytes (`text_prompt`), the text the training lab's model learned.
"""

import functools
from dataclasses import dataclass

import numpy as np

from playground.transformer.data import lecture_bytes

WORKLOAD_TITLES = {  # a workload's name (params.workload) as a table's title says it
    "section46": "the lecture's 4.6 requests",
    "prefix": "4.5's shared 100-token prefix",
    "ex10": "exercise 10's 8 samples of a 1000-token prompt",
    "samples": "parallel samples (exercise 10)",
    "batch": "a batch sweep",
    "bench": "the op benchmark",
}


def workload_title(name: str) -> str:
    """What a table's title calls a workload: the lecture's words, not the parameter's value."""
    return WORKLOAD_TITLES.get(name, name)


def kv_rows(keys, positions, width: int) -> np.ndarray:
    """The KV vector of each (key, position) pair, one row each: a batch in one numpy pass."""
    key = np.asarray(keys, dtype=np.int64)[:, None]
    pos = np.asarray(positions, dtype=np.int64)[:, None]
    chan = np.arange(width, dtype=np.int64)[None, :]
    vals = (key * 7919 + pos * 104_729 + chan * 31 + (key * pos) % 997) % 65_521
    vals[:, :1] = key % 65_521
    if width > 1:
        vals[:, 1:2] = pos % 65_521
    return vals.astype(np.float32)


def kv_for(key: int, start: int, num_tokens: int, width: int) -> np.ndarray:
    """The KV vectors of positions [start, start + num_tokens) of the sequence named `key`."""
    return kv_rows(np.full(num_tokens, key), np.arange(start, start + num_tokens), width)


def kv_for_batch(keys: list[int], starts: list[int], counts: list[int], width: int) -> np.ndarray:
    """kv_for of several sequences, concatenated in order (a batched append's KV frame)."""
    counts_a = np.asarray(counts, dtype=np.int64)
    rows_key = np.repeat(np.asarray(keys, dtype=np.int64), counts_a)
    first = np.repeat(np.cumsum(counts_a) - counts_a, counts_a)
    rows_pos = np.repeat(np.asarray(starts, dtype=np.int64), counts_a) + np.arange(counts_a.sum()) - first
    return kv_rows(rows_key, rows_pos, width)


@dataclass(frozen=True)
class RequestSpec:
    """One inference request: the prompt is known, the output length only to the replayer."""

    req_id: int
    prompt_len: int
    output_len: int


def section46_requests(
    num_requests: int = 1000,
    prompt_min: int = 50,
    prompt_max: int = 499,
    output_mean: float = 200.0,
    output_cap: int = 2048,
    seed: int = 0,
) -> list[RequestSpec]:
    """Prompts uniform in [prompt_min, prompt_max]; outputs geometric with the given mean, capped
    (long-tailed as real outputs are, so a 'reserve the maximum' server wastes most of what it holds)."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(prompt_min, prompt_max + 1, size=num_requests)
    outputs = np.minimum(rng.geometric(1.0 / output_mean, size=num_requests), output_cap)
    return [RequestSpec(i, int(p), int(o)) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]


@dataclass(frozen=True)
class ForkSpec:
    """A shared prompt, `num_branches` samples each writing `branch_tokens` (section 4.5, exercise 10)."""

    prompt_len: int
    num_branches: int
    branch_tokens: int

    def expected_pages(self, block_size: int) -> dict[str, int]:
        """The lecture's closed form, only to check what the real server reports."""
        cdiv = lambda a, b: -(-a // b)  # noqa: E731
        full, partial = divmod(self.prompt_len, block_size)
        unshared = self.num_branches * cdiv(self.prompt_len + self.branch_tokens, block_size)
        if partial:
            private = cdiv(partial + self.branch_tokens, block_size)
        else:
            private = cdiv(self.branch_tokens, block_size)
        return {"unshared": unshared, "fork": full + self.num_branches * private}


SECTION45 = ForkSpec(prompt_len=100, num_branches=4, branch_tokens=10)  # 28 vs 10 pages
EXERCISE10 = ForkSpec(prompt_len=1000, num_branches=8, branch_tokens=200)  # 600 vs 166 pages


def text_prompt(key: int, num_tokens: int) -> list[int]:
    """`num_tokens` bytes (token ids) of the lecture's text from a place chosen by `key`: the same
    prompt for every policy and every run."""
    text = _lecture()
    if not 0 < num_tokens <= len(text):
        raise ValueError(f"a prompt of 1..{len(text)} tokens, got {num_tokens}")
    start = (key * 7919) % (len(text) - num_tokens + 1)
    return text[start : start + num_tokens].tolist()


@functools.cache
def _lecture() -> np.ndarray:
    return lecture_bytes()
