"""The `corrupt` drill fails the measurement wherever its bit lands.

In-process (threads over the local transport), so the grid is exhaustive: for every collective and
algorithm, rank count, and rank, the bench's own timed loop (`collectives.measure`) runs once per
array that rank posts, with the bit flipped in exactly that message, warm-up and timed calls alike,
and every one of those runs must count wrong elements and name where the first was seen.
"""

import numpy as np
import pytest

from nodes.collective import Params
from playground.collectives.check import Tally, describe_first_wrong, earliest_first_wrong
from playground.collectives.measure import measure
from playground.comm.faults import FaultyTransport, flip_bit
from playground.comm.world import run_local

GRID = [
    ("allreduce", "ring"),
    ("allreduce", "tree"),
    ("allreduce", "hd"),
    ("allreduce", "rd"),
    ("allreduce", "hier"),
    ("allgather", "ring"),
    ("reduce_scatter", "ring"),
    ("broadcast", "tree"),
    ("reduce", "tree"),
]
IN_PLACE = [("allreduce", "ring", True), ("allreduce", "rd", True)]
SIZE_BYTES = 44  # 11 float32: not a multiple of any rank count here; 8-byte segments cut it further


class Recording:
    """A transport wrapper that numbers the posts of one rank and notes which carried an array."""

    def __init__(self, inner):
        self.inner, self.name, self.segment_bytes = inner, inner.name, inner.segment_bytes
        self.array_posts: list[int] = []
        self.num_ops = 0

    def _count(self, got, nbytes):
        if nbytes:
            self.array_posts.append(self.num_ops)
        self.num_ops += 1
        return got

    def send(self, dst, tag, x):
        return self._count(self.inner.send(dst, tag, x), x.nbytes)

    def reserve(self, dst, count, dtype):
        return self.inner.reserve(dst, count, dtype)

    def send_reserved(self, out, tag):
        return self._count(self.inner.send_reserved(out, tag), out.array.nbytes)

    def send_obj(self, dst, tag, body):
        return self._count(self.inner.send_obj(dst, tag, body), 0)

    def receive(self, timeout_ms):
        return self.inner.receive(timeout_ms)

    def close(self):
        self.inner.close()


def _bench(collective, algorithm, n, wrap_rank, wrap, inplace=False):
    params = Params(
        collective=collective,
        algorithm=(algorithm,),
        sizes=(SIZE_BYTES,),
        iters=2,
        warmup=1,
        segment_bytes=8,
        ranks_per_node=2 if algorithm == "hier" and n % 2 == 0 else (1 if algorithm == "hier" else None),
    )
    wrappers = {}

    def body(comm):
        if comm.rank == wrap_rank:
            comm.transport = wrappers[comm.rank] = wrap(comm.transport)
        return measure(comm, params, algorithm, SIZE_BYTES, inplace=inplace)

    return run_local(n, body, timeout_s=10.0), wrappers[wrap_rank]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize(("collective", "algorithm", "inplace"), [(*g, False) for g in GRID] + IN_PLACE)
def test_a_flipped_bit_in_any_message_of_any_rank_is_counted(collective, algorithm, inplace, n):
    num_runs = 0
    for rank in range(n):
        clean, recorder = _bench(collective, algorithm, n, rank, Recording, inplace)
        assert [r["wrong"] for r in clean] == [0] * n
        for post in recorder.array_posts:  # after_ops = post: exactly this message is corrupted
            records, faulty = _bench(
                collective,
                algorithm,
                n,
                rank,
                lambda t, post=post, rank=rank: FaultyTransport(t, rank, "corrupt", post),
                inplace,
            )
            assert not faulty.armed, f"rank {rank} post {post}: the bit was never flipped"
            wrong = sum(r["wrong"] for r in records)
            assert wrong > 0, f"{collective} {algorithm} N={n}: rank {rank}'s post {post} corrupted, not seen"
            first = earliest_first_wrong(records)
            assert first is not None and first["index"] >= 0
            assert first["got"] != first["expected"]
            num_runs += 1
    assert num_runs >= n - 1  # a broadcast's leaves send nothing


def test_the_flip_changes_every_pattern_value_by_at_least_one():
    """The check's values are small integers: the flipped bit must move each of them by >= 1 (or to
    inf), so no later addition of small integers can round the change away."""
    for dtype in ("float32", "float64", "int32", "int64"):
        for v in range(-512, 513):
            x = np.array([v, 7], dtype=dtype)
            flip_bit(x)
            assert x[1] == 7
            changed = float(x[0])
            assert np.isinf(changed) or abs(changed - v) >= 1, (dtype, v, changed)


def test_the_first_wrong_element_is_named_with_its_phase_and_place():
    tally = Tally(warmup=2)
    want = np.arange(5, dtype=np.float32)
    assert tally.check(want.copy(), want, 0) == 0
    got = want.copy()
    got[3] = 9
    assert tally.check(got, want, 1, bucket=4) == 1
    got[1] = 8
    assert tally.check(got, want, 3) == 2
    assert tally.wrong == 3
    assert tally.record() == {
        "wrong": 3,
        "first_wrong": {"iteration": 1, "warmup": True, "bucket": 4, "index": 3, "got": 9.0, "expected": 3.0},
    }
    timed = Tally(warmup=2)
    timed.check(got, want, 3)
    per_rank = [{"wrong": 0}, timed.record(), tally.record()]
    first = earliest_first_wrong(per_rank)
    assert (first["rank"], first["warmup"], first["iteration"]) == (2, True, 1)
    assert describe_first_wrong(first) == (
        "first seen on rank 2 at warm-up iteration 1, bucket 4: element 3 is 9.0, expected 3.0"
    )
    assert describe_first_wrong(earliest_first_wrong(per_rank[:2])) == (
        "first seen on rank 1 at timed iteration 1: element 1 is 8.0, expected 1.0"
    )
