"""The engine's knobs (vLLM's names) and their defaults, in one frozen dataclass."""

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = 1024  # running sequences at most (vLLM's max_num_seqs)
    max_num_batched_tokens: int = 8192  # prefill tokens in one step (a longer window runs alone)
    watermark: float = 0.01  # admit only while this share of the pool stays free
    kernel: str = "native"  # decode attention: native (C) or numpy (attention.py)


DEFAULT_ENGINE = EngineConfig()
