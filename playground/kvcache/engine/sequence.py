"""A `generate` request and its sequences, in vLLM's words.

A `GenerateRequest` (vLLM's sequence group) is one `generate` call: a prompt, its `SamplingParams`, and
the `n` sequences that sample from it. A `Sequence` is one sample: its token ids (the prompt,
then what it generated), how many of them have KV in the pool (`num_cached_tokens`), its status
and its own random generator. Sample i draws from `np.random.default_rng(seed + i)`, so sample i
is what `playground.transformer.generate(model, prompt, max_new_tokens, temperature=t, seed=seed +
i)` returns, token for token.

The window: learned positions stop at `context - 1`, so a sequence longer than the model's
context keeps the KV of its last `context` tokens only, as nanoGPT's `generate` (and ours) crop:
token `window_start` sits at position 0. A sequence whose cache is full starts again from its last
`context` tokens (a prefill, exactly what a preemption by recompute does).
"""

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

import numpy as np


class SequenceStatus(Enum):
    WAITING = auto()  # no KV in the pool: admitted by a prefill of its window
    RUNNING = auto()  # its KV is in the pool; each step decodes its newest token
    FINISHED = auto()  # max_new_tokens generated; its memory is freed


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    n: int = 1
    temperature: float = 0.0
    seed: int = 0
    share_prompt: bool = True  # the n samples fork from one prefill; False: each its own copy


@dataclass(eq=False)
class GenerateRequest:
    """One generate call (vLLM's sequence group); `seqs[i]` is sample i once the prompt has been prefilled (before that
    only sample 0, the prompt's sequence, exists). Times are the engine's clock."""

    request_id: int
    client: bytes
    reply_id: Any
    prompt: list[int]
    params: SamplingParams
    arrival_s: float
    seqs: list["Sequence"] = field(default_factory=list)
    admitted_s: float | None = None  # first scheduled
    first_token_s: float | None = None
    finished_s: float | None = None
    num_cached_prompt_tokens: int = 0  # prompt tokens found in the prefix cache at admission
    num_preemptions: int = 0

    @property
    def is_finished(self) -> bool:
        return len(self.seqs) == self.params.n and all(s.status is SequenceStatus.FINISHED for s in self.seqs)

    def __repr__(self):
        return f"GenerateRequest({self.request_id}, {len(self.prompt)} prompt tokens, {self.params})"


class Sequence:
    def __init__(self, seq_id: int, request: GenerateRequest, sample: int, token_ids: list[int]):
        self.seq_id, self.request, self.sample = seq_id, request, sample
        self.token_ids = list(token_ids)
        self.status = SequenceStatus.WAITING
        self.window_start = 0
        self.num_cached_tokens = 0  # KV in the pool for token_ids[window_start : window_start + this]
        self.rng = np.random.default_rng(request.params.seed + sample)
        self.token_times_s: list[float] = []  # when each generated token was sampled

    def __repr__(self):
        return (
            f"Sequence({self.seq_id}, {self.status.name}, {len(self.token_ids)} tokens, "
            f"{self.num_cached_tokens} cached)"
        )

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - len(self.request.prompt)

    @property
    def is_done(self) -> bool:
        return self.num_generated >= self.request.params.max_new_tokens

    @property
    def window(self) -> list[int]:
        return self.token_ids[self.window_start :]

    def fits_context(self, context: int) -> bool:
        """Whether every token still fits the window (else the next step starts a new one)."""
        return len(self.token_ids) - self.window_start <= context

    def restart_window(self, context: int) -> None:
        """No KV any more (preempted, or the window is full): the next prefill recomputes the
        last `context` tokens, at positions 0.."""
        self.num_cached_tokens = 0
        self.window_start = max(0, len(self.token_ids) - context)

    def fork(self, seq_id: int, sample: int) -> "Sequence":
        """Sample `sample` of the same request, sharing this one's tokens and cached KV."""
        child = Sequence(seq_id, self.request, sample, self.token_ids)
        child.window_start, child.num_cached_tokens = self.window_start, self.num_cached_tokens
        return child
