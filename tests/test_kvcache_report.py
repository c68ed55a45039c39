"""The kvcache lab's report and its checks on synthetic per-policy results (no processes)."""

from nodes.kvcache import Params
from playground.kvlab.kvcache_report import report

STATS = {
    "capacity_slots": 200_000,
    "live_seqs": 0,
    "allocated_slots": 0,
    "errors": {},
    "peak_live_seqs": 5,
    "cow_copies": 4,
    "moved_slots": 0,
    "num_ops": 100,
}


def fork_row(mode, pages, reads_exact=True, leaked_slots=0):
    return {
        "mode": mode,
        "policy": "paged",
        "pages": pages,
        "allocated_slots": 16 * pages,
        "used_slots": 0,
        "shared_blocks": 0,
        "cow_copies": 0,
        "reads_exact": reads_exact,
        "leaked_slots": leaked_slots,
    }


def policy(name="paged", stats=None, clients=None):
    return {
        "policy": name,
        "elapsed_s": 0.5,
        "stats": {**STATS, **(stats or {})},
        "samples": [],
        "clients": clients or {},
    }


def test_prefix_workload_matches_the_lecture_pages():
    rows = [fork_row("unshared", 28), fork_row("fork", 10), fork_row("prefix_cache", 10)]
    rep = report([policy(clients={"1": {"fork_rows": rows}})], Params(workload="prefix"), "/nonexistent")
    assert rep.ok and rep.failures == [] and rep.tables[0].rows == rows
    assert rep.tables[0].title == "Sharing a prompt: 4.5's shared 100-token prefix"
    assert rep.notes[0].startswith(
        "100-token prompt, 4 branches writing 10 each, block 16: the lecture expects 28 pages"
    )
    assert rep.data == {"kvcache": [{"policy": "paged", "elapsed_s": 0.5, "stats": {**STATS}}]}


def test_every_check_names_the_policy_and_what_went_wrong():
    rows = [fork_row("unshared", 28), fork_row("fork", 11, reads_exact=False, leaked_slots=16)]
    leaky = policy(
        stats={"live_seqs": 1, "allocated_slots": 16, "errors": {"internal_error": 2}},
        clients={"1": {"fork_rows": rows}},
    )
    rep = report([leaky], Params(workload="prefix"), "/nonexistent")
    assert not rep.ok
    assert rep.failures == [
        "paged fork: a branch read back differently than written",
        "paged fork: 16 slots leaked",
        "paged fork: server holds 11 pages, the lecture says 10",
        "paged: 1 sequences / 16 slots still held after every client freed its sequences",
        "paged: 2 internal errors in the server",
    ]


def test_bench_rows_and_read_mismatches():
    lat = {"create": [100.0], "append": [200.0, 400.0], "read": [150.0], "free": [90.0]}
    clients = {
        "1": {"ops": 50, "tokens_appended": 500, "read_mismatches": 0, "latencies_us": lat},
        "2": {"ops": 50, "tokens_appended": 300, "read_mismatches": 3, "latencies_us": lat},
    }
    rep = report([policy(clients=clients)], Params(workload="bench", bench_duration_s=0.5), "/nonexistent")
    (row,) = rep.tables[0].rows
    assert (row["clients"], row["ops"], row["ops_per_s"], row["tokens_per_s"]) == (2, 100, 200.0, 1600.0)
    assert row["append_p50_us"] == 300.0 and row["append_p99_us"] >= row["append_p50_us"]
    assert rep.failures == ["paged: 3 reads differed from what was written"]


def test_replay_workload_tables_and_plot(tmp_path):
    samples = [[0.0, 1, 100, 112, 199_888], [0.1, 4, 440, 448, 199_552], [0.2, 4, 460, 480, 199_520]]
    clients = {
        "1": {
            "completed": 3,
            "waited": 1,
            "failed": 0,
            "preempted": 0,
            "read_mismatches": 0,
            "latencies_us": {"create": [100.0], "append": [50.0, 60.0]},
        }
    }
    paged = {**policy(clients=clients), "samples": samples}
    reserve = {**policy("reserve_max", stats={"peak_live_seqs": 1}, clients=clients), "samples": samples}
    rep = report([paged, reserve], Params(num_requests=3), tmp_path)
    assert (
        rep.ok
        and rep.files == ["kvcache-memory.png"]
        and (tmp_path / "kvcache-memory.png").stat().st_size > 0
    )
    policies, latency = rep.tables
    assert [r["policy"] for r in policies.rows] == ["paged", "reserve_max"]
    assert policies.rows[0]["completed"] == 3 and policies.rows[0]["peak_seqs"] == 5
    assert [r["op"] for r in latency.rows[:5]] == ["create", "append", "read", "free", "all"]
    assert (
        rep.notes[0]
        == "paged admits 5.0x the peak concurrent sequences of reserve-max (lecture 4.6: about 5x)"
    )
