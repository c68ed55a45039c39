"""The mixture-of-experts layer that replaces a block's MLP: router, permute, dispatch, experts,
combine, un-permute, forward and backward, over an expert group of P ranks.

    forward                                          backward (each step's mirror, in reverse)
    router     probs, choice, gates; capacity; the balancing loss's sum     (routing.py)
    permute    the kept assignments' token rows, in the order they leave    (permute.py)
    all-to-all each rank's rows to the ranks that hold their experts        (`Exchange.rows`)
    permute    the rows that arrived, grouped by expert
    experts    each expert's MLP on its rows                                (experts.py)
    un-permute the results back in the order they arrived
    all-to-all the results back to the ranks their tokens came from
    un-permute each result into its token's slot, weighted by its gate and summed

The model calls `forward(layer, x, p)` with the block's ln_2 output and the parameter views, and
`backward(layer, dout, saved, p, g, denominator)`; the loss's denominator scales the balancing loss's
gradient as it scales the cross-entropy's. A training step sets `bias` (the routing workload's push,
broadcast against (T, E)) before its forward; `clock` times each phase across forward and backward
(the step's split), `loads` records what each forward routed (tokens per expert and per rank, drops).

One process (P = 1) passes no exchange: the rows stay where they are. Expert parallelism passes the
expert group's all-to-all (`Exchange`: the training lab's, over a process group of the grid).
"""

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from playground.core.errors import UsageError
from playground.transformer.moe.config import EXPERT_PREFIX, ROUTER, ExpertPlan
from playground.transformer.moe.experts import ExpertSaved, expert_backward, expert_forward
from playground.transformer.moe.permute import PERMUTATIONS, ExpertRows, Route
from playground.transformer.moe.routing import (
    balance_backward,
    balance_forward,
    capacity_keep,
    router_backward,
    router_forward,
)

PHASES = ("router", "permute", "alltoall", "experts", "unpermute")  # the step's split, in this order


class Exchange(Protocol):
    """The expert group's two all-to-alls (rank s's block of the result came from rank s)."""

    size: int

    def counts(self, send: np.ndarray) -> np.ndarray:
        """(P, c) int64, row r to rank r -> (P, c), row s from rank s (equal blocks)."""
        ...

    def rows(self, x: np.ndarray, send_rows: np.ndarray, recv_rows: np.ndarray) -> np.ndarray:
        """(m, w) cut into send_rows[r] rows for rank r -> (R, w), recv_rows[s] rows from rank s."""
        ...


class LocalExchange:
    """One rank: everything it sends, it receives."""

    size = 1

    def counts(self, send: np.ndarray) -> np.ndarray:
        return send

    def rows(self, x: np.ndarray, send_rows: np.ndarray, recv_rows: np.ndarray) -> np.ndarray:
        return x


class PhaseClock:
    """Seconds per phase, added across calls until `reset`."""

    def __init__(self):
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    @contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t0

    def reset(self) -> dict[str, float]:
        """The phases' seconds so far, and zero again."""
        out, self.seconds = self.seconds, dict.fromkeys(PHASES, 0.0)
        return out


@dataclass
class Loads:
    """What the forwards since the last `reset` routed, a row per block: this rank's tokens' assignments
    per expert before drops (`routed`) and kept (`kept`), and the rows its own experts computed
    (`received`: its experts' load, from every rank of its group)."""

    routed: dict[int, list[int]] = field(default_factory=dict)
    kept: dict[int, list[int]] = field(default_factory=dict)
    received: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def record(self) -> dict:
        layers = sorted(self.routed)
        return {
            "routed": [self.routed[layer] for layer in layers],
            "kept": [self.kept[layer] for layer in layers],
            "received": [self.received[layer] for layer in layers],
        }


@dataclass
class MoESaved:
    """What a block's backward needs from its MoE forward."""

    x2: np.ndarray
    probs: np.ndarray
    choice: np.ndarray
    weights: np.ndarray  # the gates, zero where dropped
    keep: np.ndarray
    f: np.ndarray  # per group, the share of assignments routed to each expert
    route: Route
    experts: ExpertRows
    expert_saved: list[ExpertSaved]
    combined: np.ndarray  # what combine_backward needs: the slots or the rows that came back
    aux_sum: float

    @property
    def nbytes(self) -> int:
        arrays = [self.probs, self.choice, self.weights, self.keep, self.combined]
        return sum(a.nbytes for a in arrays) + sum(s.nbytes for s in self.expert_saved)


class MoELayer:
    """The experts of `plan` in place of every block's MLP (the module doc); `permute`: sorted or gathered."""

    def __init__(self, plan: ExpertPlan, exchange: Exchange | None = None, permute: str = "sorted"):
        if permute not in PERMUTATIONS:
            raise UsageError(f"one of {', '.join(PERMUTATIONS)}, got {permute!r}", field="permute")
        if exchange is None and plan.is_split:
            raise UsageError(f"{plan.describe()} needs its expert group's all-to-all", field="exchange")
        exchange = exchange or LocalExchange()
        if exchange.size != plan.size:
            raise UsageError(f"an exchange of {exchange.size} ranks for {plan.describe()}", field="exchange")
        self.plan, self.exchange, self.permute = plan, exchange, permute
        self.route = PERMUTATIONS[permute]
        self.bias: np.ndarray | None = None
        self.clock = PhaseClock()
        self.loads = Loads()
        self.aux_share = 0.0  # the last forward's balancing loss (its share of the training loss)

    def begin(self, bias: np.ndarray | None = None) -> None:
        """A new step: its routing workload's `bias` ((T, E), (E,) or None), the clock and loads from zero."""
        self.bias = bias
        self.clock.reset()
        self.loads = Loads()

    def forward(self, layer: int, x: np.ndarray, p: dict[str, np.ndarray]) -> tuple[np.ndarray, MoESaved]:
        """x (B, T, d) (B groups of T tokens) or (n, d) (one group) -> the layer's output, same shape."""
        config, clock, plan = self.plan.config, self.clock, self.plan
        E, k, d = config.experts, config.top_k, x.shape[-1]
        T = x.shape[-2]
        x2 = x.reshape(-1, d)
        with clock("router"):
            probs, choice, gates = router_forward(
                x2, p[f"h.{layer}.{ROUTER}"], k, self._bias(x2.shape[0], T, E)
            )
            keep, routed = capacity_keep(choice.reshape(-1, T, k), E, config.capacity(T))
            keep = keep.reshape(-1, k)
            aux_sum, f = balance_forward(probs.reshape(-1, T, E), routed, k)
            weights = np.where(keep, gates, 0)
        with clock("permute"):
            route = self.route(choice, keep, E, plan.size)
            send = route.pack(x2)
        with clock("alltoall"):
            experts = route.receiver(self.exchange)
            arrived = self.exchange.rows(send, route.send_rows, experts.recv_rows)
        with clock("permute"):
            inputs = experts.group(arrived)
        w = self._expert_views(p, layer)
        with clock("experts"):
            done = [expert_forward(xe, *(a[e] for a in w)) for e, xe in enumerate(inputs)]
        with clock("unpermute"):
            results = experts.ungroup([y for y, _ in done], d, x.dtype)
        with clock("alltoall"):
            back = self.exchange.rows(results, experts.recv_rows, route.send_rows)
        with clock("unpermute"):
            out, combined = route.combine(back, weights)
        self.loads.routed[layer] = routed.sum(axis=0).tolist()
        self.loads.kept[layer] = np.bincount(choice[keep], minlength=E).tolist()
        self.loads.received[layer] = int(experts.recv_rows.sum())
        saved = MoESaved(
            x2, probs, choice, weights, keep, f, route, experts, [s for _, s in done], combined, aux_sum
        )
        return out.reshape(x.shape), saved

    def backward(
        self,
        layer: int,
        dout: np.ndarray,
        s: MoESaved,
        p: dict[str, np.ndarray],
        g: dict[str, np.ndarray],
        denominator: int,
    ) -> np.ndarray:
        """The gradient of the layer's input from its output's `dout`; writes the router's gradient and
        this rank's experts' into `g`. `denominator`: the loss's (the balancing loss is divided by it)."""
        clock, d = self.clock, dout.shape[-1]
        dout2 = dout.reshape(-1, d)
        with clock("unpermute"):
            drows, dweights = s.route.combine_backward(dout2, s.weights, s.combined)
        with clock("alltoall"):
            darrived = self.exchange.rows(drows, s.route.send_rows, s.experts.recv_rows)
        with clock("unpermute"):
            dys = s.experts.group(darrived)
        w, gw = self._expert_views(p, layer), self._expert_views(g, layer)
        with clock("experts"):
            dxs = [
                expert_backward(dy, saved, w[0][e], w[2][e], gw[0][e], gw[1][e], gw[2][e], gw[3][e])
                for e, (dy, saved) in enumerate(zip(dys, s.expert_saved, strict=True))
            ]
        with clock("permute"):
            dresults = s.experts.ungroup(dxs, d, dout.dtype)
        with clock("alltoall"):
            dsend = self.exchange.rows(dresults, s.experts.recv_rows, s.route.send_rows)
        with clock("permute"):
            dx2 = s.route.pack_backward(dsend)
        with clock("router"):
            T = s.probs.shape[0] // s.f.shape[0]
            scale = self.plan.config.aux_loss_coef / denominator
            daux = balance_backward(s.f, T, scale).reshape(s.probs.shape)
            router = f"h.{layer}.{ROUTER}"
            dx2 += router_backward(
                np.where(s.keep, dweights, 0), s.choice, s.probs, daux, s.x2, p[router], g[router]
            )
        return dx2.reshape(dout.shape)

    def aux_loss(self, saved: list[MoESaved], denominator: int) -> float:
        """The balancing loss's share of the training loss: coef x the blocks' sums / denominator."""
        self.aux_share = self.plan.config.aux_loss_coef * sum(s.aux_sum for s in saved) / denominator
        return self.aux_share

    def _bias(self, n: int, T: int, E: int) -> np.ndarray | None:
        """The workload's bias for n tokens in groups of T: (T, E) or (E,) repeated for every group."""
        if self.bias is None:
            return None
        bias = np.asarray(self.bias)
        if bias.ndim > 2 or bias.shape[-1] != E or (bias.ndim == 2 and bias.shape[0] != T):
            raise UsageError(f"a routing bias broadcasts against ({T}, {E}), got {bias.shape}", field="bias")
        return np.broadcast_to(bias, (n // T, T, E)).reshape(n, E)

    @staticmethod
    def _expert_views(views: dict[str, np.ndarray], layer: int) -> list[np.ndarray]:
        prefix = f"h.{layer}.{EXPERT_PREFIX}mlp."
        return [views[prefix + s] for s in ("c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias")]
