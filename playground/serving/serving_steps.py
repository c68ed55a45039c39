"""The serving lab's engine steps beside the decode-step model (step_model.py): where each step's
time went (the model's layers, the attention over the pool, the bookkeeping around them), the
model's prediction of every step, and paging's tokens/s gain over reserve-max as the model
predicts it and as measured.

Pure functions over what rank 0 returned: each setup's `split` (serving_stats.step_split), and
the rates and shape the model used (step_model.MachineRates, StepShape).
"""

import math

from playground.display.report import Table
from playground.models.band import band_words, within


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def with_model(rows: list[dict], by_batch: dict) -> list[dict]:
    """The batch sweep's rows (serving_stats.batch_figures) with the model's step beside the
    measured one: `model_ms`, the median prediction of the engine's decode-only steps of that
    batch, and `engine_ms`, their measured median (the client's step adds the server's loop)."""
    out = []
    for r in rows:
        b = by_batch.get(r["batch"]) or by_batch.get(str(r["batch"])) or {}
        model_ms = 1e3 * b.get("predicted_s", float("nan"))
        out.append(
            {
                **r,
                "engine_ms": 1e3 * b.get("measured_s", float("nan")),
                "model_ms": model_ms,
                "measured_over_model": _ratio(r["step_ms"], model_ms),
            }
        )
    return out


def band_note(ratios: dict[str, float]) -> str:
    """How many rows' measured / model (`ratios`, by row name) are inside the band the model is
    held to, and the ones outside with their values."""
    ratios = {k: v for k, v in ratios.items() if not math.isnan(v)}
    off = {k: v for k, v in ratios.items() if not within(v)}
    words = f"measured / model {band_words()} is the band the model is held to: {len(ratios) - len(off)} of {len(ratios)} rows"
    if off:
        words += "; outside it: " + ", ".join(f"{k} {v:.2f}" for k, v in off.items())
    return words


def model_notes(rank0: dict, ratios: dict[str, float]) -> list[str]:
    """The decode-step model's formula and rates, and the verdict on `ratios` (measured / model by
    row name) from those values."""
    rates, shape = rank0.get("rates"), rank0.get("shape")
    if not rates or not shape:
        return []
    notes = [
        "model (step_model.py): step = weights (one row: weight bytes / read rate; more rows: weight bytes / "
        "pack rate + 2 x params x rows / GEMM rate) + KV bytes / read rate + per-sequence and per-step work; "
        f"weights {shape['weight_bytes'] / 1e6:.1f} MB, KV {shape['kv_bytes_per_token'] / 1024:.1f} KiB a token; "
        f"rates: read {rates['read_bytes_per_s'] / 1e9:.1f} GB/s, pack {rates['pack_bytes_per_s'] / 1e9:.1f} GB/s, "
        f"GEMM {rates['gemm_flops_per_s'] / 1e9:.0f} GFLOP/s, {rates['per_seq_s'] * 1e6:.0f} us a sequence + "
        f"{rates['per_step_s'] * 1e6:.0f} us a step ({rates['source']})"
    ]
    return notes + ([band_note(ratios)] if ratios else [])


SPLIT_COLUMNS = {
    "policy": "policy",
    "steps": "steps",
    "mean_batch": "mean batch",
    "step_ms": "step ms (mean)",
    "model_pct": "model %",
    "attention_pct": "attention %",
    "bookkeeping_pct": "bookkeeping %",
    "predicted_ms": "model's step ms",
    "measured_over_model": "measured / model",
}


def split_rows(per_setup: list[dict]) -> list[dict]:
    rows = []
    for s in per_setup:
        sp = s.get("split")
        if not sp or not sp["steps"]:
            continue
        total = sp["step_s"]
        rows.append(
            {
                "policy": s["policy"] + (" + prefix cache" if s["prefix_caching"] else ""),
                "steps": sp["steps"],
                "mean_batch": sp["decodes"] / sp["steps"],
                "step_ms": 1e3 * total / sp["steps"],
                "model_pct": 100 * _ratio(sp["model_s"], total),
                "attention_pct": 100 * _ratio(sp["attention_s"], total),
                "bookkeeping_pct": 100 * _ratio(sp["bookkeeping_s"], total),
                "predicted_ms": 1e3 * sp["predicted_s"] / sp["steps"],
                "measured_over_model": _ratio(total, sp["predicted_s"]),
            }
        )
    return rows


def split_tables(params, per_setup: list[dict], rank0: dict) -> list[Table]:
    rows = split_rows(per_setup)
    if not rows:
        return []
    if not rank0.get("rates"):  # no model measured for this workload: the split alone
        columns = {k: v for k, v in SPLIT_COLUMNS.items() if k not in ("predicted_ms", "measured_over_model")}
        return [Table("Where the engine's steps went", rows, columns)]
    return [Table("Where the engine's steps went, beside the decode-step model", rows, SPLIT_COLUMNS)]


def gain(per_setup: list[dict]) -> dict | None:
    """Paged over reserve-max, tokens/s: predicted (the model's steps), measured over the engine's
    steps, and measured over the clients' wall time."""
    by = {s["policy"]: s for s in per_setup if not s["prefix_caching"] and s.get("split")}
    if "paged" not in by or "reserve_max" not in by:
        return None
    p, r = by["paged"], by["reserve_max"]

    def rate(s, key: str) -> float:
        return _ratio(s["stats"]["engine"]["generated_tokens"], s["split"][key])

    def wall(s) -> float:
        return _ratio(s["stats"]["engine"]["generated_tokens"], s["elapsed_s"])

    return {
        "predicted": _ratio(rate(p, "predicted_s"), rate(r, "predicted_s")),
        "engine": _ratio(rate(p, "step_s"), rate(r, "step_s")),
        "wall": _ratio(wall(p), wall(r)),
    }


def split_notes(params, per_setup: list[dict], rank0: dict) -> list[str]:
    notes = []
    g = gain(per_setup)
    if g:
        notes.append(
            f"paged / reserve-max tokens/s: the decode-step model predicts {g['predicted']:.2f}x (each step's weight "
            f"and KV bytes over the measured rates, and its per-sequence work), the engine's steps measured "
            f"{g['engine']:.2f}x, the clients' wall time {g['wall']:.2f}x"
        )
    if split_rows(per_setup):
        notes.append(
            "steps: model = the layers' matrix products, norms and Python; attention = the attention over the pool "
            "inside them (decode kernel and prefill); bookkeeping = scheduling, the step's metadata, sampling, "
            "finishing (time.perf_counter around each)"
        )
    ratios = {r["policy"]: r["measured_over_model"] for r in split_rows(per_setup)}
    return notes + model_notes(rank0, ratios)
