"""An expert-parallel step's predicted time: what the experts and the all-to-alls would cost if the
step waited only for its slowest rank's work and the alpha-beta exchange of the rows it routed.

    step = other                                   measured: the step outside the experts and the
                                                   all-to-alls (attention, router, permutations,
                                                   the gradients' reduction, the optimizer)
         + c x max_r rows_r                        the slowest rank's experts: rows its experts
                                                   computed (forward and backward) at c seconds a
                                                   row, c from the calibration run (balanced: every
                                                   rank the same rows)
         + sum over the step's all-to-alls of      every exchange as its busiest rank's N-1 messages
           max_r (P-1)(alpha + max(out_r, in_r)/((P-1) beta))     (`models.exchange_costs.alltoallv_time_s`)

So the model says how much of a skewed step the skew explains: a hot rank computes more rows
(the second term) and receives more bytes (the third), and every other rank waits for it inside the
all-to-alls, which is why the measured all-to-all grows with the skew on ranks whose own exchange did
not. Measured beside it: the step, each phase, the slowest and the fastest rank's experts.
"""

import statistics

from playground.models.costs import Link
from playground.models.exchange_costs import alltoallv_time_s


def seconds_per_row(figures: dict) -> float:
    """c: the run's experts' seconds per row computed, over all ranks (medians of the timed steps)."""
    rows = sum(figures["rank_rows"])
    return sum(figures["rank_experts_s"]) / rows if rows else 0.0


def alltoall_model_s(exchanges: list[list[list[list[float]]]], link: Link) -> float:
    """The median over the timed steps of the sum over the step's all-to-alls of the slowest rank's
    alpha-beta time; `exchanges[step][rank]`: that rank's calls, [bytes out, bytes in, seconds] each."""
    per_step = []
    for ranks in exchanges:
        calls = list(zip(*ranks, strict=True))  # per call: every rank's [out, in, seconds]
        per_step.append(sum(alltoallv_time_s([(c[0], c[1]) for c in call], link) for call in calls))
    return statistics.median(per_step) if per_step else 0.0


def exchange_s(exchanges: list[list[list[list[float]]]]) -> float:
    """The all-to-alls' own time: per call the seconds of the rank that waited least in it (the last
    to arrive), summed over the step's calls; the median over the timed steps."""
    per_step = [sum(min(c[2] for c in call) for call in zip(*ranks, strict=True)) for ranks in exchanges]
    return statistics.median(per_step) if per_step else 0.0


def predict_step_s(figures: dict, c_row_s: float, link: Link) -> dict:
    """{"experts_s", "alltoall_s", "step_s"} of a run (`moe_stats.run_figures`) at c_row_s a row."""
    experts = c_row_s * max(figures["rank_rows"])
    alltoall = alltoall_model_s(figures["exchanges"], link)
    other = figures["step_s"] - figures["experts_s"] - figures["alltoall_s"]
    return {"experts_s": experts, "alltoall_s": alltoall, "step_s": other + experts + alltoall}
