"""The ZeRO paper's formulas, in this lab's numbers: a rank's model state and the bytes it sends a step.

Rajbhandari et al. (2020) count mixed-precision Adam: 2 bytes a parameter for fp16 weights, 2 for
fp16 gradients, K = 12 for the optimizer (an fp32 copy of the weights, m and v): 16 Psi a rank
replicated, 2 Psi + 14 Psi / N under stage 1 (their 4 Psi + 12 Psi / N), 2 Psi + 14 Psi / N under
stage 2, 16 Psi / N under stage 3. This lab trains in one dtype of b bytes (8 in float64, 4 in
float32) with Adam's m and v in it and no extra copy of the weights (K = 2 b), so per rank:

    stage 0 (DDP)   b Psi + b Psi     + 2 b Psi        = 4 b Psi          (float64: 32 Psi)
    stage 1         b Psi + b Psi     + 2 b Psi / N    = 2 b Psi + 2 b Psi / N
    stage 2         b Psi + b Psi / N + 2 b Psi / N    = b Psi + 3 b Psi / N
    stage 3         b Psi / N + b Psi / N + 2 b Psi / N = 4 b Psi / N

(parameters + gradients + m and v), besides what is whole for a moment: a unit's gradients between
its backward and its reduce-scatter, a unit's parameters between its gather and its free.

Traffic, per rank and step, with the ring algorithms (a ring all-reduce is a reduce-scatter and an
all-gather; each sends (N - 1) / N of the buffer a rank):

    DDP, ZeRO-1, ZeRO-2       2 (N - 1) / N Psi b      (ZeRO-2 with m micro-batches: (m + 1) ...)
    ZeRO-3                    3 (N - 1) / N Psi b      (2 with reshard_after_forward off; x m)

Summed over the ranks it is exact: every chunk crosses N - 1 links once per phase. A single rank's
share differs by the few elements the chunks of a buffer not divisible by N differ by.
"""

from playground.training.units import Sharding

PSI = "\u03a8"  # Ψ


def _coefficient(x: float) -> str:
    return f"{x:g}"


def model_state_bytes(stage: int, num_params: int, num_ranks: int, itemsize: int) -> float:
    """Parameters + gradients + Adam's m and v, per rank, at ZeRO `stage` (module doc)."""
    b, psi, n = itemsize, num_params, num_ranks
    params = b * psi / n if stage >= 3 else b * psi
    grads = b * psi / n if stage >= 2 else b * psi
    states = 2 * b * psi / n if stage >= 1 else 2 * b * psi
    return params + grads + states


def model_state_formula(stage: int, itemsize: int) -> str:
    """'8Ψ + 24Ψ/N' (stage 2, float64): the module doc's line with b filled in."""
    b = itemsize
    whole = b * ((stage < 3) + (stage < 2) + 2 * (stage < 1))
    split = b * ((stage >= 3) + (stage >= 2) + 2 * (stage >= 1))
    parts = ([f"{_coefficient(whole)}{PSI}"] if whole else []) + (
        [f"{_coefficient(split)}{PSI}/N"] if split else []
    )
    return " + ".join(parts)


def sent_volumes(stage: int, micro_batches: int = 1, sharding: Sharding | None = None) -> float:
    """How many times a step sends the model's (N - 1) / N Psi b: 2 for DDP, ZeRO-1 and ZeRO-2 (m + 1
    with m micro-batches under ZeRO-2), 3 m for ZeRO-3 (2 m without resharding after forward)."""
    sharding = sharding or Sharding()
    if stage <= 1:
        return 2.0
    if stage == 2:
        return micro_batches + 1.0
    return micro_batches * (3.0 if sharding.reshard_after_forward else 2.0)


def sent_bytes_per_rank(
    stage: int, num_params: int, num_ranks: int, itemsize: int, micro_batches: int = 1, sharding=None
) -> float:
    """The bytes a rank sends a step, on average over the ranks (module doc)."""
    if num_ranks < 2:
        return 0.0
    share = (num_ranks - 1) / num_ranks * num_params * itemsize
    return sent_volumes(stage, micro_batches, sharding) * share


def sent_formula(stage: int, micro_batches: int = 1, sharding: Sharding | None = None) -> str:
    """'3 (N-1)/N Ψ b': the traffic line of the module doc for this mode."""
    return f"{_coefficient(sent_volumes(stage, micro_batches, sharding))} (N-1)/N {PSI} b"
