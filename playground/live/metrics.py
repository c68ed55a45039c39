"""The live page's numbers in Prometheus' text format (`/metrics`), made by prometheus-client from a
snapshot (playground.live.snapshot): a collector of its own registry, so nothing global is touched
and every scrape shows the run as it is now."""

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

STATUSES = ("starting", "running", "failing", "finished", "failed")


class SnapshotCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict]):
        self.snapshot = snapshot

    def collect(self) -> Iterator:
        snap = self.snapshot()
        yield from _run(snap)
        yield from _ranks(snap)
        yield from _training(snap)
        yield from _serving(snap)
        yield from _stragglers(snap)


def _run(snap: dict) -> Iterator:
    status = GaugeMetricFamily("playground_run_status", "1 for the run's status", labels=["status"])
    for s in STATUSES:
        status.add_metric([s], 1.0 if snap["status"] == s else 0.0)
    yield status
    yield GaugeMetricFamily("playground_ranks", "ranks in the run", value=snap["num_ranks"])
    yield GaugeMetricFamily("playground_failures", "failures recorded so far", value=len(snap["failures"]))


def _ranks(snap: dict) -> Iterator:
    seq = GaugeMetricFamily(
        "playground_rank_op_seq", "sequence number of the rank's current (or last) operation", labels=["rank"]
    )
    records = GaugeMetricFamily(
        "playground_rank_flight_records", "operations the rank's flight recorder has seen", labels=["rank"]
    )
    for row in snap["ranks"]:
        if row.get("seq") is not None:
            seq.add_metric([str(row["rank"])], row["seq"])
        records.add_metric([str(row["rank"])], row.get("records", 0))
    sent = CounterMetricFamily(
        "playground_bytes_sent", "bytes a rank sent another (its timing log)", labels=["src", "dst"]
    )
    for src, row in enumerate(snap["bytes"]):
        for dst, nbytes in enumerate(row):
            if src != dst:
                sent.add_metric([str(src), str(dst)], nbytes)
    yield from (seq, records, sent)


def _training(snap: dict) -> Iterator:
    step = GaugeMetricFamily("playground_train_step", "the rank's last finished step", labels=["rank"])
    loss = GaugeMetricFamily("playground_train_loss", "the global batch's loss at that step", labels=["rank"])
    step_s = GaugeMetricFamily("playground_train_step_seconds", "that step's time", labels=["rank"])
    for rank, steps in snap["training"].items():
        last = steps[-1]
        step.add_metric([str(rank)], last["step"])
        loss.add_metric([str(rank)], last["loss"])
        step_s.add_metric([str(rank)], last["step_s"])
    yield from (step, loss, step_s)


def _serving(snap: dict) -> Iterator:
    if not snap["serving"]:
        return
    last = snap["serving"][-1]
    for key, help in (
        ("running", "sequences running in the engine"),
        ("waiting", "sequences waiting in the engine's queue"),
        ("kv_blocks", "KV-cache blocks allocated"),
        ("capacity_blocks", "KV-cache blocks in the pool"),
    ):
        yield GaugeMetricFamily(f"playground_serving_{key}", help, value=last[key])


def _stragglers(snap: dict) -> Iterator:
    found = snap["stragglers"]
    if not found:
        return
    relative = GaugeMetricFamily(
        "playground_straggler_relative",
        "the fastest rank's time over this rank's, per section (1: as fast)",
        labels=["rank", "section"],
    )
    individual = GaugeMetricFamily(
        "playground_straggler_individual",
        "the rank's best time over its latest, per section (1: as fast as ever)",
        labels=["rank", "section"],
    )
    for s in found["scores"]:
        relative.add_metric([str(s["rank"]), s["section"]], s["relative"])
        individual.add_metric([str(s["rank"]), s["section"]], s["individual"])
    named = GaugeMetricFamily("playground_straggler_named", "1 for a rank named a straggler", labels=["rank"])
    for rank in found["named"]:
        named.add_metric([str(rank)], 1.0)
    yield from (relative, individual, named)


def metrics_text(snapshot: Callable[[], dict]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    return generate_latest(registry)
