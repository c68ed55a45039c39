"""Blame after an abort (playground.rendezvous.failures), with no process and no clock: the failures
and reports are fed in as the coordinator would receive them, and `abort_settled` is asked at chosen
times. A rank merely slow to answer the abort is never blamed before a rank that died or raised; a
rank that hung while its peers only timed out waiting for it is the root cause."""

from playground.core.errors import CommTimeout, PeerLost
from playground.launcher.worker import _error_message
from playground.rendezvous.coordinator import Coordinator
from playground.rendezvous.failures import (
    ABORT_GRACE_S,
    SETTLE_S,
    RankFailure,
    blame_order,
    is_explained,
    link_waits_first,
)


def aborted_world(tmp_path, n: int, first: RankFailure) -> Coordinator:
    """A coordinator of our own launcher (no router, no pids: nothing is signalled) whose run was
    aborted by `first`."""
    coordinator = Coordinator(n, 10.0, tmp_path, watch_exits=True)
    coordinator.fail(first)
    return coordinator


def report(coordinator: Coordinator, rank: int, exc: BaseException) -> None:
    """Rank `rank` reports `exc` as a real rank does, then exits (its sentinel is seen)."""
    coordinator.reported.add(rank)
    coordinator.on_error(rank, _error_message(rank, exc))
    coordinator.exited.add(rank)


def settle_times(coordinator: Coordinator) -> tuple[float, float]:
    """Just after the early settle (SETTLE_S after the abort), and just after the abort deadline."""
    aborted_at = coordinator.abort_deadline - ABORT_GRACE_S
    return aborted_at + SETTLE_S + 0.01, coordinator.abort_deadline + 0.01


def test_a_rank_slow_to_answer_the_abort_is_never_blamed_before_the_rank_that_died(tmp_path):
    killed = RankFailure(2, 0.5, "signal", "killed by SIGKILL")
    coordinator = aborted_world(tmp_path, 4, killed)
    coordinator.exited.add(2)
    for r in (1, 3):
        report(coordinator, r, PeerLost(r, "rank 2 failed", peer=2))
    early, late = settle_times(coordinator)
    # Rank 0 has not answered yet: it keeps the whole grace (a busy host), it is not judged early.
    assert not coordinator.abort_settled(early)
    assert coordinator.failures[0] is killed and len(coordinator.failures) == 3
    assert coordinator.abort_settled(late)
    outcome = coordinator.outcome()
    assert outcome.root_cause is killed and not killed.secondary
    silent = outcome.failures[-1]
    assert (silent.rank, silent.kind, silent.secondary) == (0, "hang", True)
    assert "did not answer the abort" in silent.message


def test_a_rank_that_raised_stays_the_root_cause_over_a_silent_one(tmp_path):
    coordinator = Coordinator(3, 10.0, tmp_path, watch_exits=True)
    report(coordinator, 1, ValueError("bad gradient on rank 1"))
    report(coordinator, 2, PeerLost(2, "rank 1 failed", peer=1))
    coordinator.blame_silent({0})
    root = coordinator.outcome().root_cause
    assert (root.rank, root.error_type) == (1, "ValueError")
    assert [(f.rank, f.secondary) for f in coordinator.failures] == [(1, False), (2, True), (0, True)]


def test_a_hung_rank_is_the_root_cause_when_its_peers_only_timed_out(tmp_path):
    coordinator = Coordinator(3, 10.0, tmp_path, watch_exits=True)
    for r in (0, 2):
        report(coordinator, r, CommTimeout(r, "recv", peer=1, waited_s=2.0))
    early, _ = settle_times(coordinator)
    # Every rank that reported is gone and only rank 1 is silent: judged at once, not at the deadline.
    assert coordinator.abort_settled(early)
    root = coordinator.outcome().root_cause
    assert (root.rank, root.kind) == (1, "hang")
    assert "rank 0, 2 timed out waiting for it" in root.message
    assert all(f.secondary for f in coordinator.failures[1:])


def test_among_silent_ranks_the_dead_come_first_then_those_waited_for():
    waits = [RankFailure(3, 1.0, "error", "CommTimeout: ...", waiting_for=0, error_type="CommTimeout")]
    assert blame_order({0, 1, 2}, waits, gone=set()) == [0, 1, 2]
    assert blame_order({0, 1, 2}, waits, gone={2}) == [2, 0, 1]


def test_only_a_primary_failure_that_is_not_a_wait_explains_a_run():
    timeout = RankFailure(0, 1.0, "error", "CommTimeout: ...", waiting_for=1, error_type="CommTimeout")
    lost = RankFailure(1, 1.0, "error", "PeerLost: ...", secondary=True, waiting_for=2, error_type="PeerLost")
    assert not is_explained([timeout, lost])
    for kind in ("signal", "exit", "lost", "register"):
        assert is_explained([timeout, RankFailure(2, 1.0, kind, "...")])
    assert is_explained([RankFailure(2, 1.0, "error", "ValueError: x", error_type="ValueError")])


def test_when_only_waits_failed_a_wait_across_the_drilled_link_comes_first():
    """A delayed link kills nothing: every rank times out, and the first to may wait for a peer on
    its own host. The root cause is a wait across the host the drill was done to."""

    def wait(rank, peer):
        return RankFailure(
            rank, 1.0 + rank, "error", "CommTimeout: ...", waiting_for=peer, error_type="CommTimeout"
        )

    hosts = {0: "h0", 1: "h0", 2: "h1", 3: "h1", 4: "h2"}
    same_host, across, across_drilled = wait(1, 0), wait(0, 4), wait(4, 3)
    failures = [same_host, across, across_drilled]
    assert link_waits_first(failures, hosts, {"h1": "delay of 30s added at 0.70s"}) == [
        across_drilled,
        across,
        same_host,
    ]
    assert link_waits_first(failures, hosts, {}) == [across, across_drilled, same_host]
    assert link_waits_first(failures, dict.fromkeys(hosts, "h0"), {}) == failures  # one host: as they came
    killed = RankFailure(2, 0.5, "signal", "killed by SIGKILL")
    assert link_waits_first([same_host, killed], hosts, {"h1": "..."}) == [same_host, killed]  # explained
