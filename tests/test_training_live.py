"""The live recovery's agreement and transfer (training/live.py `catch_up`) on in-process ranks:
the newest committed step wins, the lowest rank holding it sends, every rank behind ends with its
state and records, and a group where nobody holds any state says so."""

from types import SimpleNamespace

import numpy as np
import pytest

from playground.comm.world import run_local
from playground.core.errors import StateLost
from playground.training.live import catch_up
from playground.training.loop import StepLog


class Strategy:
    """Adam's state as a strategy gives it (`state`, `load_state`), the step count the commit."""

    def __init__(self, steps: int, fill: float):
        self.m, self.v, self.steps = np.full(5, fill), np.full(5, 2 * fill), steps

    def state(self) -> dict:
        return {"adam.m": self.m, "adam.v": self.v, "adam.steps": np.array(self.steps, dtype=np.int64)}

    def load_state(self, state: dict) -> None:
        self.m[:], self.v[:], self.steps = state["adam.m"], state["adam.v"], int(state["adam.steps"])


def trainer_at(steps: int, fill: float) -> SimpleNamespace:
    return SimpleNamespace(model=SimpleNamespace(params=np.full(7, fill)), gradients=Strategy(steps, fill))


def log_of(steps: int, rank: int) -> StepLog:
    return StepLog(
        steps=[{"step": s, "loss": float(s), "rank": rank} for s in range(steps)], digest=f"d{rank}"
    )


@pytest.mark.timeout(30)
def test_the_newest_committed_state_goes_to_every_rank_behind_it():
    """Rank 1 and 2 committed 4 steps (a ring all-reduce completed on them), rank 0 only 3, rank 3
    is a replacement with nothing: rank 1, the lowest holding 4, sends to ranks 0 and 3."""
    committed = [3, 4, 4, 0]

    def rank(comm):
        trainer, log = (
            trainer_at(committed[comm.rank], float(comm.rank)),
            log_of(committed[comm.rank], comm.rank),
        )
        got = catch_up(comm, trainer, log, holds_state=comm.rank != 3)
        return got, trainer, log

    results = run_local(4, rank)
    for r, (got, trainer, log) in enumerate(results):
        assert (got.step, got.source, got.behind) == (4, 1, [0, 3])
        want = 2.0 if r == 2 else 1.0  # rank 2 was not behind: its own state stays
        assert np.array_equal(trainer.model.params, np.full(7, want))
        assert np.array_equal(trainer.gradients.m, np.full(5, want)) and trainer.gradients.steps == 4
        assert [s["step"] for s in log.steps] == [0, 1, 2, 3]
    assert [s["rank"] for s in results[0][2].steps] == [0, 0, 0, 1]  # its own records, then the source's
    assert [s["rank"] for s in results[3][2].steps] == [1, 1, 1, 1]
    assert results[3][2].digest == "d1"


@pytest.mark.timeout(30)
def test_ranks_that_agree_send_nothing():
    results = run_local(2, lambda comm: catch_up(comm, trainer_at(5, 1.0), log_of(5, comm.rank)))
    assert all(got.source is None and got.behind == [] and got.step == 5 for got in results)


@pytest.mark.timeout(30)
def test_a_group_where_no_rank_holds_the_state_raises_state_lost():
    with pytest.raises(StateLost, match="no rank of generation 0 holds the training's state"):
        run_local(2, lambda comm: catch_up(comm, trainer_at(0, 0.0), log_of(0, comm.rank), holds_state=False))
