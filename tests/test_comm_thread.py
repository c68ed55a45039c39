"""The communication thread and the one traced all-reduce of a bucket (`allreduce_bucket`): every
rank gets numpy's sum, in place or into a new array, from the thread or from the main thread, each
traced as the same `bucket.allreduce` span; a failure on the thread is raised on the main thread."""

import numpy as np
import pytest

from playground.collectives.bucketing import plan_buckets
from playground.collectives.comm_thread import CommThread, allreduce_bucket
from playground.comm.world import run_local
from playground.core.errors import WaitTimeout
from playground.tracing.trace import Tracer, read_events

SIZES = [12, 40, 8, 20, 4]  # float32 gradients' bytes, backward order
BUCKETS = plan_buckets(SIZES, 24)  # [12], [40], [8, 20], [4]


def rank_buffer(rank: int) -> np.ndarray:
    return np.arange(sum(SIZES) // 4, dtype=np.float32) * (rank + 1)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("n", [2, 3])
def test_the_thread_and_the_main_thread_give_numpys_sum_in_one_span(tmp_path, n):
    expected = sum(rank_buffer(r) for r in range(n))

    def body(comm):
        comm.tracer = Tracer(comm.rank, tmp_path / f"rank-{comm.rank}.jsonl", messages=False)
        flat = rank_buffer(comm.rank)
        views = [b.view(flat) for b in BUCKETS]
        thread = CommThread(comm, views, "ring", {"mode": "overlap"})
        try:
            for b in reversed(BUCKETS):  # any order: each result comes back under its bucket
                thread.submit(b.index, 7)
            done = thread.wait_step(len(BUCKETS), 10.0)
        finally:
            thread.close()
        assert np.array_equal(flat, rank_buffer(comm.rank))  # out of place: the views are untouched
        for b in BUCKETS:  # then in place, on this thread
            allreduce_bucket(comm, views[b.index], b.index, 8, "tree", inplace=True, mode="serial")
        comm.tracer.flush()
        return {b: out for b, (out, _) in done.items()}, flat

    for rank, (outs, flat) in enumerate(run_local(n, body)):
        assert np.array_equal(np.concatenate([outs[b.index] for b in BUCKETS]), expected)
        assert np.array_equal(flat, expected)
        spans = [e for e in read_events(tmp_path / f"rank-{rank}.jsonl") if e["name"] == "bucket.allreduce"]
        steps = [(e["args"]["step"], e["args"]["mode"]) for e in spans]
        assert steps == [(7, "overlap")] * 4 + [(8, "serial")] * 4
        on_thread, on_rank = {e["tid"] for e in spans[:4]}, {e["tid"] for e in spans[4:]}
        assert len(on_thread) == len(on_rank) == 1 and on_thread != on_rank  # the comm thread, the rank's
        assert sorted((e["args"]["bucket"], e["args"]["bytes"]) for e in spans[:4]) == [
            (b.index, b.num_bytes) for b in BUCKETS
        ]


def fail(bucket, step):
    raise RuntimeError(f"bucket {bucket} of step {step} went wrong")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("reduce", "waited_for", "error", "words"),
    [
        (fail, 1, RuntimeError, "bucket 3 of step 1 went wrong"),  # raised on the main thread
        (lambda bucket, step: bucket, 2, WaitTimeout, "finished 1 of 2 buckets"),  # one never submitted
    ],
)
def test_what_goes_wrong_on_the_thread_is_raised_by_wait_step(reduce, waited_for, error, words):
    def body(comm):
        thread = CommThread(comm, reduce=reduce)
        try:
            thread.submit(3, 1)
            with pytest.raises(error, match=words):
                thread.wait_step(waited_for, 0.5)
        finally:
            thread.close()

    run_local(1, body)
