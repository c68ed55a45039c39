"""The KV-cache lab's report: rank 0's result (server stats, samples, every client's result per
policy) -> tables, the memory plot, and the checks that decide `ok`.

Checks: every read returned exactly what was written; nothing leaked once the workload freed
its sequences; no internal error; for the fork workloads on the paged policy, the page counts
the server reports equal the lecture's (28 vs 10, 600 vs 166 at block size 16).
"""

from pathlib import Path

from playground.display.report import Report, Table
from playground.kvcache.plots import plot_memory
from playground.kvcache.stats import leak_failures, summarize_samples
from playground.kvcache.workloads import EXERCISE10, SECTION45, workload_title
from playground.kvlab import kvcache_stats

REPLAY_COLUMNS = {
    "policy": "policy",
    "peak_seqs": "peak seqs",
    "mean_seqs": "mean seqs",
    "util_pct": "util %",
    "peak_util_pct": "peak util %",
    "internal_pct": "internal frag %",
    "external_pct": "external frag %",
    "completed": "done",
    "waited": "waited",
    "preempted": "preempted",
    "failed": "failed",
    "cow_copies": "COW copies",
    "moved_slots": "moved slots",
    "elapsed_s": "time s",
}


def _replay_tables(
    params, per_policy: list[dict], run_dir: Path
) -> tuple[list[Table], list[str], list[str], list]:
    rows, lat_rows, failures, notes = [], [], [], []
    for pol in per_policy:
        clients = list(pol["clients"].values())
        rows.append(_replay_row(pol, clients))
        lat = kvcache_stats.merge_latencies([c.get("latencies_us", {}) for c in clients])
        for op in ("create", "append", "read", "free", "all"):
            q = kvcache_stats.percentiles_us(lat.get(op, []))
            lat_rows.append(
                {"policy": pol["policy"], "op": op, "n": q["n"], "p50_us": q["p50_us"], "p99_us": q["p99_us"]}
            )
        mismatches = sum(c.get("read_mismatches", 0) for c in clients)
        if mismatches:
            failures.append(f"{pol['policy']}: {mismatches} reads differed from what was written")
        failures += leak_failures(pol)
    by = {r["policy"]: r for r in rows}
    if "paged" in by and "reserve_max" in by and by["reserve_max"]["peak_seqs"]:
        notes.append(
            f"paged admits {by['paged']['peak_seqs'] / by['reserve_max']['peak_seqs']:.1f}x the peak "
            f"concurrent sequences of reserve-max (lecture 4.6: about 5x)"
        )
    notes.append(
        "util/internal/external: time averages over the busy period (>= half the peak sequences); "
        "external = share of free slots outside the largest hole"
    )
    tables = [
        Table(
            f"KV-cache policies, {workload_title(params.workload)} ({params.num_requests} requests, "
            f"capacity {params.capacity_tokens} tokens, block {params.block_size})",
            rows,
            REPLAY_COLUMNS,
        ),
        Table("op latency as the clients measured it", lat_rows),
    ]
    return tables, notes, failures, ["kvcache-memory.png"]


def _replay_row(pol: dict, clients: list[dict]) -> dict:
    """One policy's replay: the server's peak and time-averaged memory, the clients' counts summed."""
    st = pol["stats"]
    frag = summarize_samples(pol["samples"], st["capacity_slots"])

    def total(key: str) -> int:
        return sum(c.get(key, 0) for c in clients)

    return {
        "policy": pol["policy"],
        "peak_seqs": st["peak_live_seqs"],
        "mean_seqs": frag["mean_live_seqs"],
        "util_pct": 100 * frag["utilisation"],
        "peak_util_pct": 100 * frag["peak_utilisation"],
        "internal_pct": 100 * frag["internal_frag"],
        "external_pct": 100 * frag["external_frag"],
        "completed": total("completed"),
        "waited": total("waited"),
        "preempted": total("preempted"),
        "failed": total("failed"),
        "cow_copies": st["cow_copies"],
        "moved_slots": st["moved_slots"],
        "elapsed_s": pol["elapsed_s"],
    }


def _fork_tables(params, per_policy: list[dict]) -> tuple[list[Table], list[str], list[str]]:
    spec = SECTION45 if params.workload == "prefix" else EXERCISE10
    expected = spec.expected_pages(params.block_size)
    rows, failures = [], []
    for pol in per_policy:
        client1 = pol["clients"].get("1", {})
        for row in client1.get("fork_rows", []):
            rows.append(row)
            if not row["reads_exact"]:
                failures.append(f"{pol['policy']} {row['mode']}: a branch read back differently than written")
            if row["leaked_slots"]:
                failures.append(f"{pol['policy']} {row['mode']}: {row['leaked_slots']} slots leaked")
            want = expected.get(row["mode"] if row["mode"] != "prefix_cache" else "fork")
            if pol["policy"] == "paged" and want is not None and row["pages"] != want:
                failures.append(
                    f"paged {row['mode']}: server holds {row['pages']} pages, the lecture says {want}"
                )
        failures += leak_failures(pol)
    notes = [
        f"{spec.prompt_len}-token prompt, {spec.num_branches} branches writing {spec.branch_tokens} each, "
        f"block {params.block_size}: the lecture expects {expected['unshared']} pages unshared, "
        f"{expected['fork']} with fork + copy-on-write (pages of contiguous policies = allocated slots / block)"
    ]
    legend = {
        "shared_blocks": "blocks referenced by more than one sequence while every branch is alive",
        "reads_exact": "every branch read back exactly what it wrote",
        "leaked_slots": "slots still allocated after every sequence was freed",
    }
    return (
        [Table(f"Sharing a prompt: {workload_title(params.workload)}", rows, legend=legend)],
        notes,
        failures,
    )


def _bench_tables(params, per_policy: list[dict]) -> tuple[list[Table], list[str]]:
    rows, failures = [], []
    for pol in per_policy:
        clients = list(pol["clients"].values())
        ops = pol["stats"]["num_ops"]
        lat = kvcache_stats.merge_latencies([c.get("latencies_us", {}) for c in clients])
        a, q = kvcache_stats.percentiles_us(lat.get("append", [])), kvcache_stats.percentiles_us(lat["all"])
        rows.append(
            {
                "policy": pol["policy"],
                "clients": len(clients),
                "ops": ops,
                "ops_per_s": ops / pol["elapsed_s"],
                "tokens_per_s": sum(c["tokens_appended"] for c in clients) / pol["elapsed_s"],
                "append_p50_us": a["p50_us"],
                "append_p99_us": a["p99_us"],
                "all_p50_us": q["p50_us"],
                "all_p99_us": q["p99_us"],
            }
        )
        mism = sum(c.get("read_mismatches", 0) for c in clients)
        if mism:
            failures.append(f"{pol['policy']}: {mism} reads differed from what was written")
        failures += leak_failures(pol)
    title = (
        f"KV-cache server throughput: {params.bench_seqs} sequences per client, one batched append "
        f"of a token to each per request, {params.bench_duration_s:g} s"
    )
    return [Table(title, rows)], failures


def report(per_policy: list[dict], params, run_dir) -> Report:
    """The report from rank 0's per-policy results (server stats, samples and every client's
    result); `params` is the node's Params."""
    files: list[str] = []
    notes: list[str] = []
    if params.workload == "section46":
        tables, notes, failures, files = _replay_tables(params, per_policy, Path(run_dir))
        plot_memory(
            per_policy, Path(run_dir) / files[0], f"KV-cache memory over time, {params.num_requests} requests"
        )
    elif params.workload == "bench":
        tables, failures = _bench_tables(params, per_policy)
    else:
        tables, notes, failures = _fork_tables(params, per_policy)
    data = {
        "kvcache": [{k: v for k, v in pol.items() if k not in ("samples", "clients")} for pol in per_policy]
    }
    return Report(ok=not failures, tables=tables, notes=notes, failures=failures, data=data, files=files)
