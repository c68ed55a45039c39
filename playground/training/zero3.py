"""ZeRO stage 3 (Rajbhandari et al., 2020), PyTorch's FSDP (`fully_shard`): the parameters sharded too.

Each rank keeps only its chunk of every unit's parameters (`param_shards[u]`), gradients and Adam's
states: b Psi / N + b Psi / N + 2 b Psi / N = 4 b Psi / N (the ZeRO paper's 16 Psi / N). A unit's
parameters are whole only while a piece of the model that reads them computes:

    before a piece (`unit_span`): the units it needs all-gathered into a buffer of the unit, its
        views put where the model reads its parameters (`model.p`); with prefetch depth d the next
        d units of the pass are all-gathered too, on the communication thread, while this piece
        computes (FSDP2: one unit ahead);
    after the last piece of a pass that reads a unit: the buffer freed, after forward
        (`reshard_after_forward`, FSDP's default; off, the units stay whole until their backward)
        and after backward; backward's gradients go as ZeRO-2's (`sharded.UnitStrategy`).

So a step all-gathers every unit twice (forward, backward) and reduce-scatters it once: 3 (N - 1) /
N Psi b sent by a rank, half as much again as DDP (2 with `reshard_after_forward` off). The order
on the communication thread is the order the ranks ask in, the same on every rank: a backward
piece asks for the next unit's gather before its own reduce-scatter, so the gather is not queued
behind it. Without the thread (a grid: the trainer's own messages run during compute) everything
runs when asked for, and prefetching has nothing to overlap with.

Checked: after each update the ranks exchange the exact integer sum of each shard they own
(`checks.exact_sum`, `agree_params`); every gathered unit is checked chunk by chunk against its
owner's sum before the model reads it, so a corrupted all-gather fails the step naming the unit and
the owner; the reduce-scatters as ZeRO-2's.
"""

import time
import zlib

import numpy as np

from playground.collectives import allgather
from playground.core.errors import ResultMismatch
from playground.training.checks import exact_sum, step_name
from playground.training.sharded import PARAM, UnitStrategy, unit_views
from playground.training.units import BACKWARD, FORWARD
from playground.transformer import Transformer


class ZeroThree(UnitStrategy):
    """Parameters, gradients and Adam's states sharded by units (a `modes.GradientStrategy`)."""

    def __init__(self, comm, model, buckets, setup, mode, owns_comm: bool = True):
        super().__init__(comm, model, buckets, setup, mode, owns_comm)
        self.mode_name = mode.name
        self.prefetch = setup.sharding.prefetch if owns_comm else 0
        self.reshard_after_forward = setup.sharding.reshard_after_forward
        self.param_views: dict = model.p
        whole = model.params
        self.param_shards = [
            whole[u.start + a : u.start + b].copy()
            for u, (a, b) in zip(self.units.units, self.chunks, strict=True)
        ]
        if isinstance(model, Transformer):
            model.params = np.empty(0, self.dtype)  # the whole buffer goes: the shards take its place
        self.param_views.clear()
        self.gathered: dict[int, np.ndarray] = {}
        self.in_flight: dict[int, tuple] = {}
        self.order = {d: self.units.gather_order(d) for d in (FORWARD, BACKWARD)}
        self.first_piece = {d: (self.units.pieces(d) or [""])[0] for d in (FORWARD, BACKWARD)}
        self.last_use = {d: self.units.last_use(d) for d in (FORWARD, BACKWARD)}
        self.issued_upto = {FORWARD: -1, BACKWARD: -1}
        self.gathers = 0
        self.expected: list[list[int]] = []
        self.agree_params(-1, mode.name)  # every rank learns every shard's sum before the first gather

    def param_shard(self, u: int) -> np.ndarray:
        return self.param_shards[u]

    def gather(self) -> None:
        """Nothing after the update: the next forward gathers what it needs."""

    def state(self) -> dict[str, np.ndarray]:
        """ZeRO-2's, and this rank's chunk of every unit's parameters (no rank holds them whole)."""
        return super().state() | {f"unit{u}.params": shard for u, shard in enumerate(self.param_shards)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        super().load_state(state)
        for u, shard in enumerate(self.param_shards):
            shard[...] = state[f"unit{u}.params"]
        self.expected = []  # the shards' sums are exchanged again before the next gather

    # -- gathering and freeing around the model's pieces ------------------------------------------
    def _before(self, piece: str) -> None:
        needed = self.units.needs(piece)
        if not needed:
            return
        if not self.expected:  # after a checkpoint was loaded: every rank is here, the thread idle
            self.agree_params(self.step, self.mode_name)
        direction = piece.partition(".")[0]
        if piece == self.first_piece[direction]:
            self.issued_upto[direction] = -1
        order = self.order[direction]
        upto = min(len(order) - 1, max(order.index(u) for u in needed) + self.prefetch)
        for u in order[self.issued_upto[direction] + 1 : upto + 1]:
            self._issue(u)
        self.issued_upto[direction] = max(self.issued_upto[direction], upto)
        t0 = time.perf_counter()
        for u in needed:
            self._issue(u)  # a unit needed again after it was freed (not in these passes, but safe)
            if u in self.in_flight:
                buf = self._result(self.in_flight.pop(u))
                self.gathered[u] = buf
                self.param_views.update(unit_views(self.layout, self.units.units[u], buf))
        self.waited_s[direction] += time.perf_counter() - t0
        super()._before(piece)

    def _issue(self, u: int) -> None:
        if u in self.gathered or u in self.in_flight:
            return
        self.in_flight[u] = ("all_gather", u, self.gathers)
        self.gathers += 1
        self.residency.add(PARAM, u, self.units.units[u].size * self.dtype.itemsize)
        self._submit(self.in_flight[u])

    def _after(self, piece: str) -> None:
        direction = piece.partition(".")[0]
        if direction == FORWARD and not self.reshard_after_forward:
            return
        for u in self.last_use[direction].get(piece, ()):
            self._free(u)

    def _free(self, u: int) -> None:
        if self.gathered.pop(u, None) is not None:
            for name in self.units.units[u].names:
                del self.param_views[name]
            self.residency.drop(PARAM, u)

    def _all_gather(self, u: int) -> np.ndarray:
        """Unit u whole: this rank's chunk put in place, the others gathered around it, each chunk
        checked against its owner's sum."""
        unit, (a, b) = self.units.units[u], self.chunks[u]
        buf = np.empty(unit.size, self.dtype)
        buf[a:b] = self.param_shards[u]
        with self.comm.tracer.span(
            "unit.allgather", cat="op", step=self.step, unit=u, bytes=int(buf.nbytes), **self.span_args
        ):
            allgather(self.comm, buf, inplace=True)
        self._verify(u, buf)
        return buf

    def _verify(self, u: int, buf: np.ndarray) -> None:
        for r, (a, b) in enumerate(self.units.bounds[u]):
            if exact_sum(buf[a:b]) != self.expected[u][r]:
                raise ResultMismatch(
                    self.comm.rank,
                    f"{step_name(self.step, self.mode_name)}: the all-gather of unit {self.units.units[u].label} "
                    f"brought rank {r}'s shard changed: its words sum to {exact_sum(buf[a:b])}, rank {r} holds "
                    f"{self.expected[u][r]}",
                )

    # -- the checks and the record ----------------------------------------------------------------
    def agree_params(self, step: int, mode: str) -> str:
        """Every rank's exact sum of each shard it owns, to every rank: what the next gathers are
        checked against; a digest of the whole table (the same on every rank)."""
        table = self.comm.allgather_obj([exact_sum(s) for s in self.param_shards])
        self.expected = [[table[r][u] for r in range(len(table))] for u in range(len(self.units))]
        return f"{zlib.crc32(repr(table).encode()):08x}"

    def full_params(self) -> np.ndarray:
        """Every parameter, all-gathered unit by unit on this thread (a collective: every rank of the
        data group calls it, with the communication thread idle)."""
        out = np.empty(self.layout.num_elements, self.dtype)
        for unit, (a, b), shard in zip(self.units.units, self.chunks, self.param_shards, strict=True):
            whole = out[unit.start : unit.stop]
            whole[a:b] = shard
            allgather(self.comm, whole, inplace=True)
        return out

    def held(self, ranges) -> np.ndarray:
        """The values this rank's shards hold of the flat buffer's element `ranges`, in order."""
        parts = []
        for start, stop in ranges:
            for unit, (a, b), shard in zip(self.units.units, self.chunks, self.param_shards, strict=True):
                lo, hi = max(start, unit.start + a), min(stop, unit.start + b)
                if lo < hi:
                    parts.append(shard[lo - unit.start - a : hi - unit.start - a])
        return np.concatenate(parts) if parts else np.empty(0, self.dtype)

    def params_bytes(self) -> int:
        return int(sum(s.nbytes for s in self.param_shards))
