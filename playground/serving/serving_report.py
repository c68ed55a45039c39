"""The serving lab's report: rank 0's per-setup results (server stats, samples, step log and every
client's result) -> tables, the memory plot, and the checks that decide `ok`.

Checks: every setup generated the same tokens for the same request; the samples a client
compared with dense generation (`verify_every`) were equal; nothing is held once every request
finished; no internal error; no request generated twice (a setup resumed after a restart answers
what its journal holds without generating it again); on the `samples` workload with the paged policy, the pages the
server held at its peak equal exercise 10's (600 copies, 166 forked at block 16), and the forked
samples equal the copies token for token.
"""

from pathlib import Path

from playground.display.report import Report, Table
from playground.kvcache.plots import plot_memory
from playground.kvcache.stats import leak_failures
from playground.kvcache.workloads import ForkSpec, workload_title
from playground.serving import serving_stats, serving_steps


def _name(setup: dict) -> str:
    return setup["policy"] + (" + prefix cache" if setup["prefix_caching"] else "")


def run_history(per_setup: list[dict], differs: int) -> dict:
    """The run as one history, the shape chaos --recover reads from a report's data: requests
    answered once, run again after a restart, answered twice and never (both must be 0), and those
    whose tokens differ from the fault-free reference (`differs`: between setups, or from dense
    generation)."""
    hs = [serving_stats.history(s) for s in per_setup]
    return {
        "asked": sum(h["asked"] for h in hs),
        "once": sum(h["replied"] for h in hs),
        "again": sum(h["rerun"] for h in hs),
        "twice": sum(max(h["twice"], 0) for h in hs),
        "never": sum(max(h["never"], 0) for h in hs),
        "differs": differs,
        "replayed": sum(h["replayed"] for h in hs),
    }


def _differs(per_setup: list[dict]) -> int:
    mismatched = sum(
        c.get("verified", {}).get("mismatched", 0) for s in per_setup for c in s["clients"].values()
    )
    return mismatched + len(serving_stats.differing_requests(per_setup))


def _common_failures(per_setup: list[dict]) -> list[str]:
    failures = []
    for s in per_setup:
        failures += leak_failures({"policy": _name(s), "stats": s["stats"]})
        engine = s["stats"]["engine"]
        if engine["requests"] or engine["running"] or engine["waiting"]:
            failures.append(
                f"{_name(s)}: the engine still holds {engine['requests']} requests after the workload"
            )
        for rank, c in s["clients"].items():
            v = c.get("verified", {})
            if v.get("mismatched"):
                failures.append(
                    f"{_name(s)}, rank {rank}: {v['mismatched']} of {v['checked']} samples differ from dense "
                    f"generation ({v['first_mismatch']})"
                )
        h = serving_stats.history(s)
        if h["twice"] > 0:
            failures.append(
                f"{_name(s)}: {h['generated']} generations for {h['answered']} requests answered: "
                f"{h['twice']} generated twice"
            )
        if h["never"] > 0:
            failures.append(f"{_name(s)}: {h['never']} of {h['asked']} requests never answered")
    differ = serving_stats.differing_requests(per_setup)
    if differ:
        failures.append(f"requests {differ[:5]} generated different tokens under different setups")
    return failures


REPLAY_COLUMNS = {
    "policy": "policy",
    "prefix_caching": "prefix cache",
    "done": "done",
    "failed": "failed",
    "peak_seqs": "peak seqs",
    "mean_seqs": "mean seqs",
    "mean_batch": "mean batch",
    "util_pct": "util %",
    "preempted": "preempted",
    "generated_tokens": "tokens",
    "elapsed_s": "time s",
    "tokens_per_s": "tokens/s",
    "ttft_p50_s": "TTFT p50 s",
    "ttft_p99_s": "TTFT p99 s",
    "tpot_p50_ms": "TPOT p50 ms",
    "tpot_p99_ms": "TPOT p99 ms",
    "hit_rate_pct": "prefix hit %",
}


def _replay(params, per_setup: list[dict], run_dir: Path) -> tuple[list[Table], list[str], list[str]]:
    rows = [serving_stats.replay_figures(s) for s in per_setup]
    notes = [
        "mean seqs / util: time averages over the busy period (>= half the peak); mean batch: sequences "
        "decoded per step; TPOT: time per output token after the first; tokens/s: generated tokens over the "
        "clients' wall time"
    ]
    by = {(r["policy"], r["prefix_caching"]): r for r in rows}
    paged, reserve = by.get(("paged", False)), by.get(("reserve_max", False))
    if params.workload == "section46" and paged and reserve and reserve["tokens_per_s"]:
        notes.append(
            f"paged: {paged['peak_seqs'] / max(reserve['peak_seqs'], 1):.1f}x the peak sequences and "
            f"{paged['tokens_per_s'] / reserve['tokens_per_s']:.2f}x the tokens/s of reserve-max in the same "
            f"{params.capacity_tokens}-token KV budget, time to first token p50 {paged['ttft_p50_s']:.2f} s vs "
            f"{reserve['ttft_p50_s']:.2f} s (lecture 4.6: about 5x the requests; vLLM: 2-4x the throughput)"
        )
    cached = by.get(("paged", True))
    if params.workload == "prefix" and paged and cached:
        notes.append(
            f"prefix caching: {cached['hit_rate_pct']:.0f}% of prompt tokens found in the cache; TTFT p50 "
            f"{paged['ttft_p50_s'] * 1e3:.0f} -> {cached['ttft_p50_s'] * 1e3:.0f} ms"
        )
    title = (
        f"Serving {workload_title(params.workload)}: {rows[0]['requests'] if rows else 0} requests per setup, KV budget "
        f"{params.capacity_tokens} tokens, block {params.block_size}"
    )
    files = []
    if params.workload == "section46":
        files = ["serving-memory.png"]
        plot_memory(
            [{**s, "policy": _name(s)} for s in per_setup],
            run_dir / files[0],
            f"KV memory while serving {params.num_requests} requests",
        )
    return [Table(title, rows, REPLAY_COLUMNS)], notes, files


def _samples(params, per_setup: list[dict]) -> tuple[list[Table], list[str], list[str]]:
    spec = ForkSpec(params.sample_prompt_tokens, params.n, params.sample_tokens - 1)
    expected = spec.expected_pages(params.block_size)
    rows, failures = [], []
    for s in per_setup:
        modes = s["clients"]["1"]["modes"]
        for m in modes:
            ttft = max(r["ttft_s"] for r in m["requests"])
            tokens = sum(r["num_tokens"] for r in m["requests"])
            rows.append(
                {
                    "policy": s["policy"],
                    "mode": m["mode"],
                    "pages": -(-m["peak_allocated_slots"] // params.block_size),
                    "peak_slots": m["peak_allocated_slots"],
                    "cow_copies": m["cow_copies"],
                    "moved_slots": m["moved_slots"],
                    "ttft_s": ttft,
                    "elapsed_s": m["elapsed_s"],
                    "tokens_per_s": tokens / m["elapsed_s"],
                }
            )
            want = expected["unshared" if m["mode"] == "copies" else "fork"]
            if s["policy"] == "paged" and rows[-1]["pages"] != want:
                failures.append(
                    f"paged {m['mode']}: {rows[-1]['pages']} pages at the peak, exercise 10 says {want}"
                )
        fork = [d for r in modes[1]["requests"] for d in r["digests"]]
        copies = [d for r in modes[0]["requests"] for d in r["digests"]]
        if fork != copies:
            failures.append(f"{s['policy']}: the forked samples differ from the copies")
    notes = [
        f"{params.sample_prompt_tokens}-token prompt, {params.n} samples of {params.sample_tokens} tokens (the "
        f"last token's KV is never written), block {params.block_size}: exercise 10 expects {expected['unshared']} "
        f"pages as copies and {expected['fork']} forked with copy-on-write; pages = peak allocated slots / block"
    ]
    columns = {
        "policy": "policy",
        "mode": "mode",
        "pages": "pages at peak",
        "peak_slots": "peak slots",
        "cow_copies": "COW copies",
        "moved_slots": "moved slots",
        "ttft_s": "TTFT s",
        "elapsed_s": "time s",
        "tokens_per_s": "tokens/s",
    }
    return [Table("Parallel sampling: n samples forked vs n copies", rows, columns)], notes, failures


def _batch(params, per_setup: list[dict], rank0: dict) -> tuple[list[Table], list[str]]:
    tables, notes, ratios = [], [], {}
    for s in per_setup:
        rows = serving_steps.with_model(
            serving_stats.batch_figures(s["clients"]["1"]["batches"]), s.get("split", {}).get("by_batch", {})
        )
        tables.append(Table(f"Decode throughput vs batch ({_name(s)})", rows))
        ratios.update({f"{_name(s)} batch {r['batch']}": r["measured_over_model"] for r in rows})
        if len(rows) > 1 and rows[0]["tokens_per_s"]:
            notes.append(
                f"{_name(s)}: batch {rows[-1]['batch']} decodes {rows[-1]['tokens_per_s'] / rows[0]['tokens_per_s']:.1f}x "
                f"the tokens/s of batch {rows[0]['batch']} (lecture 2.4: 48 -> 615 items/s, 12.8x)"
            )
    notes += serving_steps.model_notes(rank0, ratios)
    return tables, notes


def _resumed_notes(per_setup: list[dict]) -> list[str]:
    notes = []
    for s in per_setup:
        if s.get("resumed"):
            h = serving_stats.history(s)
            notes.append(
                f"{_name(s)} resumed after a restart: {h['loaded']} answers kept in its journal, "
                f"{h['replayed']} of them sent again to the clients' re-sent ids, "
                f"{h['generated'] - h['loaded']} requests generated by the new server, none twice; "
                "its times and engine counts are the new server's"
            )
    return notes


def report(per_setup: list[dict], params, run_dir, rank0: dict | None = None) -> Report:
    """`rank0`: what rank 0 returned beside the setups (the model's config and path, which model
    it served, the decode-step model's rates and shape)."""
    rank0 = rank0 or {}
    failures = _common_failures(per_setup)
    files: list[str] = []
    notes: list[str] = []
    if params.workload == "samples":
        tables, notes, more = _samples(params, per_setup)
        failures += more
    elif params.workload == "batch":
        tables, notes = _batch(params, per_setup, rank0)
    else:
        tables, notes, files = _replay(params, per_setup, Path(run_dir))
        tables += serving_steps.split_tables(params, per_setup, rank0)
        notes += serving_steps.split_notes(params, per_setup, rank0)
        texts = serving_stats.text_rows(per_setup[0]) if per_setup else []
        if texts:
            tables.insert(
                1, Table(f"What was served ({_name(per_setup[0])}; every setup generates the same)", texts)
            )
    if rank0.get("served"):
        notes.insert(0, rank0["served"])
    notes += _resumed_notes(per_setup)
    data = {
        "serving": [
            {k: v for k, v in s.items() if k not in ("samples", "step_log", "clients")} for s in per_setup
        ],
        **{k: rank0.get(k) for k in ("model", "model_path", "served", "rates", "shape")},
        "history": run_history(per_setup, _differs(per_setup)),
    }
    return Report(ok=not failures, tables=tables, notes=notes, failures=failures, data=data, files=files)
