"""Collectives measured like nccl-tests: per size, warm-up, timed iterations, a correctness check.

Every rank fills its input with a closed-form integer pattern (playground.collectives.check), so
every partial sum is exact in every dtype and each rank checks its own result without
communicating; `wrong` counts the elements that differ, nccl-tests' #wrong column. The check runs on
the last timed iteration of every size (a sampled one: the timed loop itself stays clean).

Beside every row, the model's time with the link named by `link`: a preset (ib, roce, ethernet,
nvlink) or a calibration.json written by `python -m playground calibrate`; by default this machine's
calibration (playground.models.calibration). The closed form (playground.models.costs) gives every
rank a CPU of its own: where ranks outnumber the calibrated cores, the row's model is the simulator
on the calibrated host instead (`model_by`: sim), which shares the cores as this machine does
(sim/calibrated.py). It is resolved once, in `summarize`, not on the ranks; only an all-to-all's
`auto` asks it on rank 0 before the first call, for the algorithm to run at each size.
"""

from dataclasses import dataclass
from typing import Literal

from playground.collectives import ALGORITHMS, IN_PLACE, registry
from playground.collectives.alltoall import check_counts
from playground.collectives.bench_report import bench_report
from playground.collectives.measure import measure_in_turn
from playground.config.node import NodeContract
from playground.core.dtypes import DtypeName, resolve
from playground.core.errors import ParamError, UsageError
from playground.core.sizes import Size, format_size
from playground.display.report import Report
from playground.models.calibration import LinkSpec, load_model, run_network
from playground.sim.calibrated import calibrated_model, install_alltoall_picks

Collective = registry.CollectiveName
Algorithm = registry.AlgorithmName


@dataclass(frozen=True)
class Params:
    collective: Collective = "allreduce"  # the one measured; broadcast and reduce have rank 0 as root
    # the algorithms measured, each at every size (Registries page); auto: all-reduce picks one per
    # size and rank count; hier needs nodes (ranks_per_node, or hosts)
    algorithm: tuple[Algorithm, ...] = ("ring",)
    # bytes as nccl-tests counts them: the whole buffer (all-gather's output, the others' input)
    sizes: tuple[Size, ...] = (8, 1024, 32768, 1 << 20, 4 << 20)
    # element type of the buffers (bfloat16: ml_dtypes'; the half types reduce in numpy, in their type)
    dtype: DtypeName = "float32"
    # reduction of allreduce, reduce_scatter, reduce (avg: the sum divided by the rank count, once);
    # with max or min a corrupt drill can go unseen
    op: Literal["sum", "avg", "max", "min"] = "sum"
    iters: int = 10  # timed calls per algorithm and size, each after a barrier; the row is their median
    # several algorithms: at each size they take turns of this many timed calls (each turn after a
    # warm-up call), so what slows a shared machine for a while reaches them alike; 0: each
    # algorithm's calls all together
    turn_calls: int = 5
    warmup: int = 2  # untimed calls before them (their results are checked too)
    check: bool = True  # count wrong elements of every result (nccl-tests' #wrong); false: not checked (-1)
    # largest piece a collective sends at once; bigger chunks are cut and pipelined. null: the
    # transport's own (4 MiB where arrays go through shared-memory rings: ipc, shm; 1 MiB over tcp)
    segment_bytes: Size | None = None
    # also measure in place (the result written over the input: allreduce, broadcast, reduce),
    # nccl-tests' second column set, beside the out-of-place one
    inplace: bool = False
    ranks_per_node: int | None = None  # hier: group ranks into nodes of this many (default: by host)
    # alltoallv: counts[r][d] elements rank r sends rank d, each row adding up to the size's elements
    # (one size); null: an uneven layout with zeros, scaled to every size (check.uneven_counts)
    counts: tuple[tuple[int, ...], ...] | None = None
    # what the model column prices: a link preset, or a calibration.json of `calibrate`; null: this
    # machine's calibration (./calibration.json or $PLAYGROUND_CALIBRATION), else a labelled default
    link: LinkSpec | None = None
    # One trace event per message sent, waited for and reduced: what `inspect` splits a rank's time
    # by. `bench` turns them off: for an 8-byte all-reduce they are a quarter of its cost here
    # (three events a message), and the baselines it is compared with log nothing.
    trace_messages: bool = True

    def __post_init__(self):
        if not self.sizes:
            raise ParamError("sizes", "give at least one size")
        if not self.algorithm:
            raise ParamError("algorithm", "give at least one algorithm")
        if self.iters < 1:
            raise ParamError("iters", f"must be >= 1, got {self.iters}")
        if self.turn_calls < 0:
            raise ParamError("turn_calls", f"must be >= 0, got {self.turn_calls}")
        if self.warmup < 0:
            raise ParamError("warmup", f"must be >= 0, got {self.warmup}")
        if self.segment_bytes is not None and self.segment_bytes < 1:
            raise ParamError("segment_bytes", f"must be >= 1, got {self.segment_bytes}")
        if self.inplace and self.collective not in IN_PLACE:
            raise ParamError("inplace", f"only {', '.join(IN_PLACE)} work in place, not {self.collective}")
        if self.counts is not None and self.collective != "alltoallv":
            raise ParamError("counts", f"only alltoallv takes counts, not {self.collective}")
        if self.ranks_per_node is not None and self.ranks_per_node < 1:
            raise ParamError("ranks_per_node", f"must be >= 1, got {self.ranks_per_node}")
        offered = ALGORITHMS[self.collective]
        for algo in self.algorithm:
            if algo not in offered and algo != "auto":
                raise ParamError("algorithm", f"{self.collective} offers {', '.join(offered)}, got {algo!r}")


def check_scenario(params: Params, ranks: int) -> None:
    if params.ranks_per_node and ranks % params.ranks_per_node:
        raise ParamError(
            "params.ranks_per_node",
            f"must divide the {ranks} ranks into whole nodes, got {params.ranks_per_node}",
        )
    if params.counts is not None:
        itemsize = resolve(params.dtype).itemsize
        try:
            check_counts(params.counts, ranks, [s // itemsize for s in params.sizes])
        except UsageError as e:
            raise ParamError("params.counts", f"{e.message} ({params.dtype})") from None


def main(comm, params: Params) -> dict:
    comm.tracer.messages = comm.tracer.messages and params.trace_messages
    if params.collective == "alltoall" and "auto" in params.algorithm:  # auto runs the model's picks
        install_alltoall_picks(comm, load_model(params.link, run_network(comm.run_dir)), params.sizes)
    which = range(len(params.algorithm))  # by position: an algorithm may be given twice
    batches = (
        [(tuple(which), s) for s in params.sizes]
        if params.turn_calls
        else [((i,), s) for i in which for s in params.sizes]
    )
    by_algorithm: list[list[dict]] = [[] for _ in which]
    for k, (picked, size) in enumerate(batches):
        algorithms = [params.algorithm[i] for i in picked]
        comm.progress(k, len(batches), f"{', '.join(algorithms)} {format_size(size)}")
        rows = measure_in_turn(comm, params, algorithms, size)
        if params.inplace:
            in_place = measure_in_turn(comm, params, algorithms, size, inplace=True)
            for row, ip in zip(rows, in_place, strict=True):
                row.update(
                    {f"ip_{key}": v for key, v in ip.items() if key not in ("size", "count", "algorithm")}
                )
        for i, row in zip(picked, rows, strict=True):
            by_algorithm[i].append(row)
    comm.progress(len(batches), len(batches), "done")
    rows = [row for mine in by_algorithm for row in mine]  # each algorithm's sizes in order
    return {"rows": rows, "ok": all(r["wrong"] <= 0 and r.get("ip_wrong", 0) <= 0 for r in rows)}


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    model = load_model(params.link, run_network(run_dir))
    return bench_report(
        [res["rows"] for res in results],
        params.collective,
        params.dtype,
        params.op,
        params.iters,
        params.warmup,
        data={"collective": params.collective, "algorithms": list(params.algorithm)},
        model=model,
        modelled=calibrated_model(model, params.collective, len(results)),
    )


CONTRACT = NodeContract(Params, summarize, check_scenario=check_scenario)
