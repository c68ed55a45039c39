"""Checkpoint and restart: goodput against the checkpoint interval, and Young/Daly's optimum.

A run takes a checkpoint every k steps of t seconds, and each stands the steps still for C seconds.
Failures strike as a Poisson process of mean M (the mean time between failures); each costs R to
recover (detection, teardown, restart and rendezvous, loading the checkpoint, warm-up) and the work
done since the last checkpoint, which is redone. A segment of work tau = k t and its checkpoint,
T = tau + C, then completes after, in expectation (Daly 2006; failures do not strike during a
recovery)

    E = (M + R) (e^(T / M) - 1)

(an attempt fails with probability 1 - e^(-T/M), and a failed one costs its time up to the failure,
M - T / (e^(T/M) - 1) on average, and R). Goodput, useful steps per second, is k / E: too frequent
checkpoints spend the run standing still, too rare ones redo much of it. To first order the time
lost is C / tau + tau / (2 M) of the run (half an interval of work lost on average per failure,
as half a page is lost on average to internal fragmentation), least at Young's (1974)

    tau* = sqrt(2 C M)

which Daly refines to sqrt(2 C M) - C for C < 2 M. In steps: k* = tau* / t.
"""

import math


def segment_s(tau_s: float, checkpoint_s: float, recover_s: float, mtbf_s: float) -> float:
    """The expected wall time of `tau_s` of work and its checkpoint, failures and recoveries included."""
    return (mtbf_s + recover_s) * math.expm1((tau_s + checkpoint_s) / mtbf_s)


def goodput(k: int, step_s: float, checkpoint_s: float, recover_s: float, mtbf_s: float) -> float:
    """Useful steps per second with a checkpoint every `k` steps (module doc)."""
    return k / segment_s(k * step_s, checkpoint_s, recover_s, mtbf_s)


def young_daly_s(checkpoint_s: float, mtbf_s: float) -> float:
    """The best interval between checkpoints, in seconds of work: sqrt(2 C M), less C (Daly) when
    C < 2 M."""
    first = math.sqrt(2 * checkpoint_s * mtbf_s)
    return first - checkpoint_s if checkpoint_s < 2 * mtbf_s else mtbf_s


def young_daly_steps(step_s: float, checkpoint_s: float, mtbf_s: float) -> float:
    """Young/Daly's interval in steps of `step_s`."""
    return young_daly_s(checkpoint_s, mtbf_s) / step_s


def best_steps(
    step_s: float, checkpoint_s: float, recover_s: float, mtbf_s: float, limit: int = 100_000
) -> int:
    """The whole number of steps between checkpoints that the goodput model itself rates best."""
    guess = max(1, round(young_daly_steps(step_s, checkpoint_s, mtbf_s)))
    candidates = range(max(1, guess // 4), min(limit, 4 * guess + 2))
    return max(candidates, key=lambda k: goodput(k, step_s, checkpoint_s, recover_s, mtbf_s))
