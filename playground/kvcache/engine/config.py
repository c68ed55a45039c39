"""The engine's knobs (vLLM's names) and their defaults, in one frozen dataclass."""

from dataclasses import dataclass

from playground.core.errors import UsageError


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = 1024  # running sequences at most (vLLM's max_num_seqs)
    # Prefill-first (the default): prefill tokens in one step (a longer window runs alone).
    # Chunked prefill: the step's whole token budget, decodes first, prompts split to fill the rest.
    max_num_batched_tokens: int = 8192
    watermark: float = 0.01  # admit only while this share of the pool stays free
    kernel: str = "native"  # decode attention: native (C) or numpy (attention.py)
    chunked_prefill: bool = False  # Sarathi-Serve's stall-free batching (scheduler.py)
    num_speculative_tokens: int = 0  # prompt-lookup drafts per greedy sequence and step (speculative.py)
    prompt_lookup_max: int = 3  # the longest n-gram the drafter matches (vLLM's prompt_lookup_max)

    def __post_init__(self):
        for name in ("max_num_seqs", "max_num_batched_tokens", "prompt_lookup_max"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"must be an integer >= 1, got {value!r}", field=name)
        k = self.num_speculative_tokens
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise UsageError(f"must be an integer >= 0, got {k!r}", field="num_speculative_tokens")


DEFAULT_ENGINE = EngineConfig()
