"""What ZeRO-2 and ZeRO-3 share (`zero2.ZeroTwo`, `zero3.ZeroThree`): the gradients reduce-scattered
unit by unit into this rank's shard as backward finishes each unit, and Adam on the shard.

Units (`units.UnitPlan`): a block each by default, every unit a contiguous slice of the flat buffer,
cut into one chunk per rank. This rank keeps, per unit, its chunk of the gradients
(`grad_shards[u]`) and Adam's m and v of its chunk (`optimizers[u]`, an `Adam` each; Adam is
elementwise, so stepping unit by unit equals stepping the whole buffer bit for bit); where the
parameters live is the subclass's (ZeRO-2: the model's whole buffer; ZeRO-3: `param_shards[u]`).

Gradients. Under data parallelism alone the model writes each unit's gradients into a buffer of that
unit only, put in place before the unit's first backward piece (`unit_span`); once backward has
announced every gradient of the unit (`on_grad_ready`, counted down as a DDP bucket is), the buffer
is reduce-scattered, this rank's chunk of the sum is added into its shard and the buffer dropped. So
no rank ever holds the whole gradient: a unit or two at a time (`Residency` counts them). In a grid
the trainer accumulates a stage's or a shard's gradients in its own flat buffer, and the units are
reduce-scattered from slices of it after backward.

Every unit's reduce-scatter runs on the communication thread while backward goes on (the trainer
owns the communicator during compute only under data parallelism alone: `owns_comm`); in a grid it
runs where it is asked for, on the main thread. With gradient accumulation every micro-batch's
gradients are reduce-scattered (the shard is where they add up): a reduce-scatter per unit per
micro-batch, the price of never holding the whole gradient.

Checked as ZeRO-1's reduce-scatter is (`checks`): every rank's sum of each chunk it put in, the
owner's sum of the result, one `Reduction` per unit, chunk and micro-batch.
"""

import threading
import time
from contextlib import contextmanager

import numpy as np

from playground.collectives import reduce_scatter
from playground.collectives.bucketing import Bucket
from playground.collectives.comm_thread import CommThread
from playground.core.errors import UsageError
from playground.training.checks import Reduction, checksum, element_sum
from playground.training.units import BACKWARD, FORWARD, UnitPlan
from playground.training.whole_params import Span
from playground.transformer import Transformer
from playground.transformer.optim import Adam

PARAM, GRAD = "param", "grad"


class Residency:
    """The units whose parameters (`PARAM`) or gradients (`GRAD`) are whole on this rank now, and
    the most at once, in units and bytes: what FSDP's memory is between its shards. Thread-safe (a
    reduce-scatter drops its buffer on the communication thread)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.alive: dict[str, dict[int, int]] = {PARAM: {}, GRAD: {}}
        self.peak_units = {PARAM: 0, GRAD: 0}
        self.peak_bytes = {PARAM: 0, GRAD: 0}

    def add(self, kind: str, unit: int, nbytes: int) -> None:
        with self._lock:
            alive = self.alive[kind]
            alive[unit] = nbytes
            self.peak_units[kind] = max(self.peak_units[kind], len(alive))
            self.peak_bytes[kind] = max(self.peak_bytes[kind], sum(alive.values()))

    def drop(self, kind: str, unit: int) -> None:
        with self._lock:
            self.alive[kind].pop(unit, None)

    def record(self) -> dict:
        return {
            "peak_param_units": self.peak_units[PARAM],
            "peak_param_unit_bytes": self.peak_bytes[PARAM],
            "peak_grad_units": self.peak_units[GRAD],
            "peak_grad_unit_bytes": self.peak_bytes[GRAD],
        }


class UnitStrategy:
    """The gradient half of ZeRO-2 and ZeRO-3 (a `modes.GradientStrategy` with its subclass's
    parameters). `buckets` (the record's, and the step-time model's) are its units in backward
    order: what it reduce-scatters, one by one, as backward finishes them."""

    reduces_every_micro_batch = True  # no whole gradient to accumulate in: the shard is the sum

    def __init__(self, comm, model, buckets: list[Bucket], setup, mode, owns_comm: bool = True):
        self.comm, self.model, self.layout = comm, model, model.layout
        self.span_args = {"mode": mode.name}
        self.units = UnitPlan(model.layout, setup.sharding.unit_blocks, comm.size)
        self.dtype = model.params.dtype
        self.buckets = unit_buckets(self.units, self.dtype.itemsize)
        self.lr_at = setup.lr_at
        self.chunks = [self.units.chunk(u.index, comm.rank) for u in self.units.units]
        self.grad_shards = [np.zeros(b - a, self.dtype) for a, b in self.chunks]
        self.optimizers = [Adam(b - a, self.dtype, setup.adam) for a, b in self.chunks]
        self.residency = Residency()
        # a Transformer's gradients go through per-unit buffers; a stage's accumulator is sliced
        self.grad_views: dict | None = model.g if isinstance(model, Transformer) else None
        if self.grad_views is not None:
            model.grads = np.empty(0, self.dtype)  # the whole buffer goes: units take its place
            self.grad_views.clear()
        self.flat_grads = None if self.grad_views is not None else model.grads
        self.unit_of_index = {model.layout[n].index: u.index for u in self.units.units for n in u.names}
        self.num_params = [len(u.names) for u in self.units.units]
        self.unit_grads: dict[int, np.ndarray] = {}  # installed gradient buffers
        self._handed: dict[tuple, np.ndarray] = {}  # a reduce-scatter's buffer, until its job takes it
        self._inline: dict[tuple, tuple[object, float]] = {}
        self.outstanding: list[tuple] = []
        self.thread = CommThread(comm, reduce=self._job) if owns_comm else None
        self.step = 0
        self.begin(0)

    # -- the step ---------------------------------------------------------------------------------
    def begin(self, step: int) -> None:
        self.step = step
        self.sums: list[Reduction] = []
        self.collective_s = 0.0  # this step's collectives' own time, wherever they ran
        self.waited_s = {FORWARD: 0.0, BACKWARD: 0.0}  # of it, what forward and backward waited for
        self.pending = list(self.num_params)
        self.scattered = [0] * len(self.units)

    @property
    def on_grad_ready(self):
        return self._ready

    def _ready(self, index: int) -> None:
        u = self.unit_of_index[index]
        self.pending[u] -= 1
        if self.pending[u]:
            return
        self.pending[u] = self.num_params[u]  # the next micro-batch's countdown
        key = ("reduce_scatter", u, self.scattered[u])
        self.scattered[u] += 1
        if self.grad_views is not None:
            self._handed[key] = self.unit_grads.pop(u)
            for name in self.units.units[u].names:
                del self.grad_views[name]
        self._submit(key)

    def reduce(self) -> None:
        """Every reduce-scatter of the step done (collected from the thread)."""
        for key in list(self.outstanding):
            self._result(key)

    def reductions(self) -> list[Reduction]:
        return self.sums

    def update(self) -> None:
        lr = self.lr_at(self.step)
        for u, optimizer in enumerate(self.optimizers):
            optimizer.step(self.param_shard(u), self.grad_shards[u], lr)

    def param_shard(self, u: int) -> np.ndarray:
        """This rank's chunk of unit `u`'s parameters, which Adam updates in place."""
        raise NotImplementedError

    def close(self) -> None:
        if self.thread is not None:
            self.thread.close()

    # -- jobs: on the communication thread, or here ---------------------------------------------
    def _submit(self, key: tuple) -> None:
        if self.thread is not None:
            self.outstanding.append(key)
            self.thread.submit(key, self.step)
        else:
            t0 = time.perf_counter()
            self._inline[key] = (self._job(key, self.step), time.perf_counter() - t0)

    def _result(self, key: tuple):
        if self.thread is not None:
            out, seconds = self.thread.wait_for(key, 4 * self.comm.timeout_s)
            self.outstanding.remove(key)
        else:
            out, seconds = self._inline.pop(key)
        self.collective_s += seconds
        return out

    def _job(self, key: tuple, step: int):
        kind, u, k = key
        return self._reduce_scatter(u, k) if kind == "reduce_scatter" else self._all_gather(u)

    def _all_gather(self, u: int) -> np.ndarray:
        raise NotImplementedError

    def _reduce_scatter(self, u: int, k: int) -> None:
        """Unit u's gradients of micro-batch k summed over the ranks; this rank's chunk added into
        its shard (copied, for the first micro-batch)."""
        unit, rank = self.units.units[u], self.comm.rank
        if self.grad_views is not None:
            buf = self._handed.pop(("reduce_scatter", u, k))
        else:
            assert self.flat_grads is not None
            buf = self.flat_grads[unit.start : unit.stop]
        put_in = [checksum(buf[a:b]) for a, b in self.units.bounds[u]]
        with self.comm.tracer.span(
            "unit.reduce_scatter", cat="op", step=self.step, unit=u, bytes=int(buf.nbytes), **self.span_args
        ):
            reduce_scatter(self.comm, buf, inplace=True)
        a, b = self.chunks[u]
        mine = buf[a:b]
        where = f"{unit.label} shard {{}}" + (f" micro-batch {k}" if k else "")
        self.sums += [
            Reduction(where.format(r), s, m, element_sum(mine) if r == rank else None)
            for r, (s, m) in enumerate(put_in)
        ]
        if k == 0:
            self.grad_shards[u][...] = mine
        else:
            self.grad_shards[u] += mine
        self.residency.drop(GRAD, u)

    # -- the model's pieces -----------------------------------------------------------------------
    def unit_span(self, span: Span) -> Span:
        """`span` with this strategy's work around each piece the model announces: before it, what
        the piece needs (gradient buffers; ZeRO-3: its units gathered), after it, what it is done
        with (ZeRO-3: units freed)."""

        @contextmanager
        def piece(name: str):
            self._before(name)
            with span(name):
                yield
            self._after(name)

        return piece

    def _before(self, piece: str) -> None:
        if self.grad_views is None or not piece.startswith(BACKWARD):
            return
        for u in self.units.needs(piece):
            if u not in self.unit_grads:
                self._install_grads(u)

    def _after(self, piece: str) -> None:
        """Nothing: gradient buffers go with their reduce-scatter."""

    def _install_grads(self, u: int) -> None:
        unit = self.units.units[u]
        buf = np.empty(unit.size, self.dtype)
        self.unit_grads[u] = buf
        assert self.grad_views is not None
        self.grad_views.update(unit_views(self.layout, unit, buf))
        self.residency.add(GRAD, u, buf.nbytes)

    # -- a checkpoint's part ------------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray]:
        """What a checkpoint keeps of this rank besides the model's parameters: per unit, its chunk's
        bounds (checked on load) and Adam's m, v (views) and step count."""
        out: dict[str, np.ndarray] = {}
        for u, (optimizer, chunk) in enumerate(zip(self.optimizers, self.chunks, strict=True)):
            out[f"unit{u}.chunk"] = np.array(chunk, dtype=np.int64)
            out |= {f"unit{u}.adam.m": optimizer.m, f"unit{u}.adam.v": optimizer.v}
            out[f"unit{u}.adam.steps"] = np.array(optimizer.steps, dtype=np.int64)
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Go on from `state()`'s: the next step is bit for bit the one this rank would have taken."""
        for u, (optimizer, chunk) in enumerate(zip(self.optimizers, self.chunks, strict=True)):
            saved = [int(x) for x in state[f"unit{u}.chunk"]]
            if saved != list(chunk):
                raise UsageError(
                    f"rank {self.comm.rank}: the saved chunk of unit {self.units.units[u].label} is {saved}, "
                    f"this rank's is {list(chunk)} (another world size or unit_blocks?)"
                )
            optimizer.m[...], optimizer.v[...] = state[f"unit{u}.adam.m"], state[f"unit{u}.adam.v"]
            optimizer.steps = int(state[f"unit{u}.adam.steps"])

    # -- what the report and the checks read ------------------------------------------------------
    def params_bytes(self) -> int:
        raise NotImplementedError

    def memory(self) -> dict:
        grads = sum(g.nbytes for g in self.grad_shards)
        if self.flat_grads is not None:
            grads += self.flat_grads.nbytes
        return {
            "params_bytes": int(self.params_bytes()),
            "grads_bytes": int(grads),
            "optimizer_bytes": self.state_bytes,
            **self.residency.record(),
        }

    @property
    def state_bytes(self) -> int:
        return int(sum(o.state_bytes for o in self.optimizers))


def unit_buckets(units: UnitPlan, itemsize: int) -> list[Bucket]:
    """The units as `Bucket`s, in the order backward finishes them (the last unit first)."""
    out: list[Bucket] = []
    first = offset = 0
    for unit in reversed(units.units):
        out.append(Bucket(len(out), first, len(unit.names), unit.size * itemsize, offset))
        first, offset = first + len(unit.names), offset + unit.size * itemsize
    return out


def unit_views(layout, unit, buf: np.ndarray) -> dict[str, np.ndarray]:
    """name -> its view in `buf`, a buffer of exactly the unit's elements."""
    out = {}
    for name in unit.names:
        spec = layout[name]
        out[name] = buf[spec.offset - unit.start : spec.stop - unit.start].reshape(spec.shape)
    return out
