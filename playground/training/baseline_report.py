"""The training report's baselines: PyTorch DDP beside our bucketed mode (windows of steps, each
with its losses, phases and overlap), and PyTorch FSDP2 beside our ZeRO-3 (step, model state, peak
RSS growth, losses)."""

import statistics

from playground.core.sizes import format_size
from playground.display.report import Table
from playground.training import training_stats
from playground.training.modes import DDP_LIKE


def _ms(x: float) -> float:
    return x * 1e3


DDP_COLUMNS = {
    "steps": "steps",
    "loss_ours": "loss (ours)",
    "loss_ddp": "loss (DDP)",
    "loss_gap": "max rel. gap",
    "step_ours_ms": "step ours (ms)",
    "step_ddp_ms": "step DDP",
    "exposed_ours_ms": "exposed ours",
    "exposed_ddp_ms": "exposed DDP",
    "overlap_ours_pct": "overlap ours (%)",
    "overlap_ddp_pct": "overlap DDP (%)",
}


def ddp_rows(
    ours: dict, ours_overlaps: training_stats.StepOverlaps, ddp: dict, ddp_records: list[list[dict]]
) -> list[dict]:
    """One row per range of steps: losses at the range's last step, the largest relative gap of the
    losses within it, the median phases over the range (slowest rank), and the range's own overlap
    (`ours_overlaps`: our mode's per step, from the trace; DDP's from its records)."""
    steps = min(len(ours["losses"]), len(ddp["losses"]))
    gaps = training_stats.relative_gaps(ours["losses"], ddp["losses"])
    per_ours = ours["slowest"]
    per_ddp = training_stats.slowest_steps(ddp_records)
    ddp_overlaps = training_stats.ddp_step_overlaps(ddp_records)
    bounds = sorted({round(i * steps / min(steps, 5)) for i in range(min(steps, 5) + 1)})
    rows = []

    def med(records: list[dict], key: str, steps_in: list[int]) -> float:
        return statistics.median(records[i][key] for i in steps_in)

    for a, b in zip(bounds, bounds[1:], strict=False):
        timed = [i for i in range(a, b) if i in training_stats.timed_steps(steps)] or list(range(a, b))
        rows.append(
            {
                "steps": f"{a}-{b - 1}",
                "loss_ours": ours["losses"][b - 1],
                "loss_ddp": ddp["losses"][b - 1],
                "loss_gap": max(gaps[a:b]),
                "step_ours_ms": _ms(med(per_ours, "step_s", timed)),
                "step_ddp_ms": _ms(med(per_ddp, "step_s", timed)),
                "exposed_ours_ms": _ms(med(per_ours, "comm_s", timed)),
                "exposed_ddp_ms": _ms(med(per_ddp, "comm_s", timed)),
                "overlap_ours_pct": training_stats.overlap_over(ours_overlaps, timed)["overlap_pct"],
                "overlap_ddp_pct": training_stats.overlap_over(ddp_overlaps, timed)["overlap_pct"],
            }
        )
    return rows


def ddp_part(
    stats: list[dict], params, step_overlaps: dict, ddp_records: list[list[dict]], tokens: int
) -> tuple[Table, dict, str]:
    """PyTorch DDP beside our mode most like it (bucketed): its table, its data for result.json
    (with its loss curve under `losses`), and the note on its buckets and loss gaps."""
    ddp = training_stats.ddp_stats(ddp_records, tokens)
    ours = next((s for mode, s in zip(params.mode, stats, strict=True) if mode == DDP_LIKE), stats[0])
    table = Table(
        f"ours ({ours['mode']}) against PyTorch DDP over Gloo, same weights and batches, "
        "each all-reducing its buckets in place",
        ddp_rows(ours, step_overlaps.get(ours["mode"], {}), ddp, ddp_records),
        DDP_COLUMNS,
    )
    gaps = training_stats.relative_gaps(ours["losses"], ddp["losses"])
    note = (
        f"DDP: {len(ddp['buckets'])} buckets ({', '.join(format_size(b) for b in ddp['buckets'])}); "
        f"largest relative loss gap {max(gaps):.2e} over {len(gaps)} steps"
    )
    return table, {**ddp, "loss_gaps": gaps, "ours": ours["mode"]}, note


FSDP_COLUMNS = {
    "run": "run",
    "step_ms": "step (ms)",
    "optimizer_ms": "optimizer",
    "state": "model state",
    "peak_growth": "peak RSS growth",
    "loss_first": "loss step 0",
    "loss_last": "loss last",
}


def fsdp_part(
    modes, stats: list[dict], fsdp_records: list[list[dict]], tokens: int
) -> tuple[Table, dict, str]:
    """Our zero3 (or the first mode) beside FSDP2: step, model state, peak RSS growth and loss; its
    data for result.json (its losses under `losses`), and the note on the loss gap."""
    k = next((i for i, m in enumerate(modes) if m.stage == 3), 0)
    ours = stats[k]
    theirs = fsdp_stats(fsdp_records, tokens)
    gaps = training_stats.relative_gaps(ours["losses"], theirs["losses"])
    ours_memory = ours["memory"]
    rows = [
        {
            "run": f"ours ({ours['mode']})",
            "step_ms": ours["step_s"] * 1e3,
            "optimizer_ms": ours["optimizer_s"] * 1e3,
            "state": format_size(
                max(m["params_bytes"] + m["grads_bytes"] + m["optimizer_bytes"] for m in ours_memory)
            ),
            "peak_growth": format_size(
                max(m["peak_rss_bytes"] - m.get("start_rss_bytes", 0) for m in ours_memory)
            ),
            "loss_first": ours["losses"][0],
            "loss_last": ours["losses"][-1],
        },
        {
            "run": "torch FSDP2",
            "step_ms": theirs["step_s"] * 1e3,
            "optimizer_ms": theirs["optimizer_s"] * 1e3,
            "state": format_size(theirs["state_bytes"]),
            "peak_growth": format_size(theirs["peak_growth_bytes"]),
            "loss_first": theirs["losses"][0],
            "loss_last": theirs["losses"][-1],
        },
    ]
    table = Table(
        "ours against PyTorch FSDP2 (fully_shard per unit, over Gloo), same weights, batches, units, prefetch "
        "and resharding: per step (median of the timed steps, slowest rank), per rank",
        rows,
        FSDP_COLUMNS,
        legend={
            "state": "parameters + gradients + Adam's states this rank holds (FSDP2: its DTensors' local shards)",
            "peak_growth": "the process's peak RSS above its RSS before the model was built (the largest rank's)",
        },
    )
    note = (
        f"FSDP2: largest relative loss gap to ours ({ours['mode']}) {max(gaps):.2e} over {len(gaps)} steps "
        f"({'float64: the same update to rounding' if max(gaps) < 1e-9 else 'the dtype rounds differently in each'})"
    )
    return table, {**theirs, "loss_gaps": gaps, "ours": ours["mode"]}, note


def fsdp_stats(per_rank: list[list[dict]], global_tokens: int) -> dict:
    """FSDP2's per-step records -> its medians (slowest rank), losses (the ranks' mean), the model state
    of its largest rank and its peak RSS growth."""
    slowest = training_stats.slowest_steps(per_rank)
    timed = [slowest[i] for i in training_stats.timed_steps(len(slowest))]
    step_s = statistics.median(s["step_s"] for s in timed)
    last = [records[-1] for records in per_rank]
    return {
        "mode": "torch FSDP2",
        "step_s": step_s,
        "forward_s": statistics.median(s["forward_s"] for s in timed),
        "backward_s": statistics.median(s["backward_s"] for s in timed),
        "optimizer_s": statistics.median(s["optimizer_s"] for s in timed),
        "tokens_per_s": global_tokens / step_s if step_s > 0 else float("nan"),
        "losses": [statistics.fmean(r[i]["loss"] for r in per_rank) for i in range(len(slowest))],
        "state_bytes": max(r["params_bytes"] + r["grads_bytes"] + r["optimizer_bytes"] for r in last),
        "peak_growth_bytes": max(0, max(r["peak_rss_bytes"] - r["start_rss_bytes"] for r in last)),
    }
