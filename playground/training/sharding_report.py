"""The training report's sharded-data-parallel part: every mode's model state and traffic against
the ZeRO formulas (`zero_formulas`), the units whole at once (FSDP2 beside ZeRO-3: `baseline_report`).

`stats` are `training_stats.mode_stats` of each mode (their `memory`: every rank's
`GradientStrategy.memory()` and RSS; `sent_bytes`: every rank's bytes sent in the last step);
`params` the node's Params.
"""

import statistics

from playground.core.sizes import format_size
from playground.display.report import Table
from playground.training.zero_formulas import (
    model_state_bytes,
    model_state_formula,
    sent_bytes_per_rank,
    sent_formula,
)

ZERO_COLUMNS = {
    "mode": "mode",
    "state": "model state",
    "state_formula": "formula",
    "state_ratio": "measured / formula",
    "whole_params": "whole params (peak)",
    "whole_grads": "whole grads (peak)",
    "sent": "sent a step",
    "sent_formula": "formula",
    "sent_ratio": "measured / formula",
}
ZERO_LEGEND = {
    "state": "parameters + gradients + Adam's m and v this rank keeps between steps (the largest rank's)",
    "whole_params": "ZeRO-3: the most units whose parameters were whole at once during a step",
    "whole_grads": "ZeRO-2 and -3: the most units whose gradients were whole at once (before their "
    "reduce-scatter)",
    "sent": "the bytes a rank's communicator sent during the last step, the mean over the ranks",
}


def _units(count: int, nbytes: int) -> str:
    return f"{count} ({format_size(nbytes)})" if count else "-"


def zero_row(mode, stats: dict, params, n: int) -> dict:
    """One mode's measured model state and traffic beside the formulas."""
    config = params.model_config
    b, psi = config.np_dtype.itemsize, config.num_params
    memory = stats["memory"]
    state = max(m["params_bytes"] + m["grads_bytes"] + m["optimizer_bytes"] for m in memory)
    formula_state = model_state_bytes(mode.stage, psi, n, b)
    sent = statistics.fmean(stats["sent_bytes"])
    formula_sent = sent_bytes_per_rank(mode.stage, psi, n, b, params.micro_batches, params.sharding)
    return {
        "mode": mode.name,
        "state": format_size(state),
        "state_formula": f"{model_state_formula(mode.stage, b)} = {format_size(round(formula_state))}",
        "state_ratio": state / formula_state,
        "whole_params": _units(
            max(m.get("peak_param_units", 0) for m in memory),
            max(m.get("peak_param_unit_bytes", 0) for m in memory),
        ),
        "whole_grads": _units(
            max(m.get("peak_grad_units", 0) for m in memory),
            max(m.get("peak_grad_unit_bytes", 0) for m in memory),
        ),
        "sent": format_size(round(sent)),
        "sent_formula": f"{sent_formula(mode.stage, params.micro_batches, params.sharding)} = "
        f"{format_size(round(formula_sent))}",
        "sent_ratio": sent / formula_sent if formula_sent else float("nan"),
        "state_bytes": state,
        "state_formula_bytes": formula_state,
        "sent_bytes": sent,
        "sent_formula_bytes": formula_sent,
    }


def zero_table(modes, stats: list[dict], params, n: int) -> tuple[Table, list[str]]:
    """The table of every mode against the formulas, and its notes."""
    config = params.model_config
    rows = [zero_row(mode, s, params, n) for mode, s in zip(modes, stats, strict=True)]
    table = Table(
        f"model state and traffic per rank against ZeRO's formulas: {config.num_params:,} parameters "
        f"(\u03a8), {n} ranks (N), b = {config.np_dtype.itemsize} bytes ({params.dtype})",
        rows,
        ZERO_COLUMNS,
        legend=ZERO_LEGEND,
    )
    notes = [
        "formulas (playground/training/zero_formulas.py): per rank, parameters + gradients + Adam's m and v "
        "of b bytes each, whole (b\u03a8) or a 1/N shard: 4b\u03a8 replicated, 2b\u03a8 + 2b\u03a8/N ZeRO-1, "
        "b\u03a8 + 3b\u03a8/N ZeRO-2, 4b\u03a8/N ZeRO-3 (the ZeRO paper's 16\u03a8, 4\u03a8 + 12\u03a8/N, "
        "2\u03a8 + 14\u03a8/N, 16\u03a8/N count 2-byte weights and gradients and 12 bytes of optimizer); "
        "traffic with ring collectives: 2 (N-1)/N \u03a8b a step for DDP, ZeRO-1 and ZeRO-2, 3 for ZeRO-3 "
        "(two gathers and a reduce-scatter)"
    ]
    if params.algorithm != "ring" and any(m.stage == 0 for m in modes):
        notes.append(
            f"the replicated modes all-reduce with {params.algorithm}: the traffic formula is the ring's"
        )
    if params.micro_batches > 1:
        notes.append(
            f"{params.micro_batches} micro-batches a step: ZeRO-2 and ZeRO-3 reduce-scatter every micro-batch's "
            "gradients (ZeRO-3 gathers for each too); the others add them up in a whole gradient buffer "
            "(not counted in the model state) and reduce once"
        )
    return table, notes
