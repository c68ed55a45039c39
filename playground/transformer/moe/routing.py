"""The router of a mixture-of-experts layer, its capacity and its balancing loss: pure forward and
backward functions over a group of tokens.

    logits = x W_r                     (n, E)   x: the block's ln_2 output, n tokens
    probs  = softmax(logits)
    choice = the k experts of highest logits (+ bias), best first               (n, k)
    gates  = probs[choice]                                                       (n, k)

`bias` is a routing workload's push (a hot expert, a hot rank): added to the scores the choice is made
on and never to the gates, as DeepSeek-V3's balancing bias is, so it moves tokens without changing
what the loss differentiates. The gates are the chosen probabilities as they are (Switch's top-1,
Qwen-MoE's and DeepSeek-V2's top-k), so the router learns through them.

Groups: a batch (G, T, d) is G groups of T tokens, one per sequence (packed tokens: one group). The
capacity and the balancing loss are counted per group, as GShard counts them, so any split of whole
sequences over data-parallel ranks routes, drops and balances every token as one process does.

Capacity: each expert takes at most C assignments of a group (`MoEConfig.capacity`). They claim
places in order of preference, then of position (GShard: every token's first choice before any
second choice); an assignment past C is dropped and its token's output lacks that expert's term (the
residual stream carries the token on). Dropless: C is None.

Balancing loss (Switch, eq. 4): per group L_g = E sum_e f_e P_e, f_e the share of the group's T k
assignments routed to e (before any drop; no gradient), P_e the mean of probs[:, e] over its tokens:
1 when the router spreads evenly, up to E when it sends everything to one expert. Per token,
T L_g = sum_t E sum_e f_e probs[t, e]: `balance_forward` returns that sum over the tokens, which the
model divides by the loss's denominator (the global batch's tokens) as it divides the cross-entropy,
so the training loss holds coef x the mean of L_g over the global batch's sequences.
"""

import numpy as np

from playground.transformer.layers import softmax


def router_forward(
    x2: np.ndarray, weight: np.ndarray, k: int, bias: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x2 (n, d) -> probs (n, E), choice (n, k) best first, gates (n, k). `bias` broadcasts against
    the logits (n, E)."""
    logits = x2 @ weight
    probs = softmax(logits)
    scores = logits if bias is None else logits + bias
    choice = top_k(scores, k)
    return probs, choice, np.take_along_axis(probs, choice, axis=-1)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """The k largest of each row, best first; a tie goes to the lower index (a stable sort), so
    every rank and one process choose alike."""
    return np.argsort(-scores, axis=-1, kind="stable")[..., :k]


def capacity_keep(choice: np.ndarray, experts: int, capacity: int | None) -> tuple[np.ndarray, np.ndarray]:
    """choice (G, T, k) -> (keep (G, T, k): which assignments fit, routed (G, E): assignments per
    expert before any drop). Places are claimed by preference, then position (the module doc)."""
    G, T, k = choice.shape
    routed = np.zeros((G, experts), dtype=np.int64)
    for g in range(G):
        routed[g] = np.bincount(choice[g].ravel(), minlength=experts)
    if capacity is None:
        return np.ones(choice.shape, dtype=bool), routed
    by_priority = choice.transpose(0, 2, 1).reshape(G, k * T)  # every first choice, then every second
    claimed = by_priority[..., None] == np.arange(experts)  # (G, kT, E)
    place = np.take_along_axis(np.cumsum(claimed, axis=1), by_priority[..., None], axis=-1)[..., 0] - 1
    keep = (place < capacity).reshape(G, k, T).transpose(0, 2, 1)
    return keep, routed


def balance_forward(probs: np.ndarray, routed: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    """probs (G, T, E), routed (G, E) -> (sum over tokens of E sum_e f_e probs[t, e], f (G, E))."""
    G, T, E = probs.shape
    f = routed / (T * k)
    return float(E * np.einsum("ge,ge->", f, probs.sum(axis=1))), f


def balance_backward(f: np.ndarray, tokens: int, scale: float) -> np.ndarray:
    """d(scale x balance_forward's sum) / d probs: scale E f_e for every token of the group, (G, T, E)."""
    G, E = f.shape
    return np.broadcast_to((scale * E) * f[:, None, :], (G, tokens, E))


def router_backward(
    dgates: np.ndarray,
    choice: np.ndarray,
    probs: np.ndarray,
    dprobs_extra: np.ndarray | None,
    x2: np.ndarray,
    weight: np.ndarray,
    dweight: np.ndarray,
) -> np.ndarray:
    """The gates' gradient (n, k) (zero where dropped) and the balancing loss's `dprobs_extra` (n, E)
    back through the softmax: writes the router's gradient into `dweight`, returns dx2 (n, d)."""
    dprobs = np.zeros_like(probs)
    np.put_along_axis(dprobs, choice, dgates, axis=-1)  # a token's k choices are distinct experts
    if dprobs_extra is not None:
        dprobs += dprobs_extra
    dlogits = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    np.matmul(x2.T, dlogits, out=dweight)
    return dlogits @ weight.T
