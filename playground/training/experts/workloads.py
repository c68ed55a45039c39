"""Routing workloads: what tokens a step sends where, beside what the router learned. Each is a bias
added to the router's scores for the choice only (never to the gates: `transformer.moe.routing`), as
large as `PUSH` so it decides the choice it touches, a function of the step, so one process and every
rank of a run route alike:

- balanced: token t of a sequence chooses experts (t k + j) mod E, j < k: every expert the same
  T k / E assignments of every sequence, the ideal the others are measured against;
- hot_expert: every token's first choice is expert 0 (its k - 1 others as the router likes);
- hot_rank: every choice among the experts of the expert group's first rank (all of them on one rank;
  among the first k experts when a rank holds fewer than k);
- moving: every token's first choice is expert (step mod E), a hotspot that moves each step;
- learned: no push: the router as it learns (at the start, near uniform at random).
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

PUSH = 100.0  # router logits are O(1): a push this large decides every choice it touches


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    bias: Callable[[int, int, int, int, int], np.ndarray | None]  # (step, T, E, k, P) -> (T, E) | (E,) | None


def _balanced(step: int, T: int, E: int, k: int, P: int) -> np.ndarray:
    bias = np.zeros((T, E))
    for j in range(k):
        bias[np.arange(T), (np.arange(T) * k + j) % E] = PUSH
    return bias


def _one(expert: int, E: int) -> np.ndarray:
    bias = np.zeros(E)
    bias[expert] = PUSH
    return bias


def _hot_rank(step: int, T: int, E: int, k: int, P: int) -> np.ndarray:
    bias = np.zeros(E)
    bias[: max(E // P, k)] = PUSH
    return bias


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "balanced", "token t's choices are experts (t k + j) mod E: every expert the same load", _balanced
        ),
        Workload("hot_expert", "every token's first choice is expert 0", lambda s, T, E, k, P: _one(0, E)),
        Workload("hot_rank", "every choice among the first rank's experts", _hot_rank),
        Workload(
            "moving",
            "every token's first choice is expert (step mod E)",
            lambda s, T, E, k, P: _one(s % E, E),
        ),
        Workload("learned", "the router as it learns, no push", lambda s, T, E, k, P: None),
    )
}
NAMES = tuple(WORKLOADS)
