"""A training node's checkpoints on one rank: what its part holds, when it is saved, and going on
from one (the training lab's side of `playground.checkpoint`).

A node trains one or more runs one after the other (the train node's modes, the pipeline node's
schedules x micro-batch counts, the tensor node's t). Its steps, counted over all its runs, number
the checkpoints: after every `checkpoint_every` of them, and at the end of each run, every rank
saves its part:

- its trainer's parameters (the whole model, a stage's or a shard's) and its mode's state
  (`GradientStrategy.state()`: Adam's m, v and step count, or ZeRO-1's shard of them);
- where it is (the data position): the run and its steps done. A step's batch is drawn from a
  generator seeded with (seed, step), so no sampler or random state is carried between steps: the
  position is the whole of it, and the seed is part of the run's identity;
- what every run so far recorded (each step's loss and times, the parameters' hash, the snapshots a
  run keeps to compare with one process), so a resumed run's record is the unbroken run's.

On a restart the launcher names the newest whole checkpoint (PLAYGROUND_RESUME); every rank loads
its part (its checksum checked) and `train_steps` restores each run as it comes: a run finished
before the checkpoint returns its saved record without training, the run it was taken in goes on
from the step after it, later runs start afresh. The optimizer's state comes back exactly and the
reductions run in the same order, so the parameters after the last step are bit for bit those of a
run without the fault.
"""

import dataclasses
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

from playground.checkpoint import store
from playground.checkpoint.writer import PartWriter
from playground.config.params import params_to_dict
from playground.core.errors import CheckpointRefused, ParamError
from playground.core.sizes import format_size
from playground.display.report import Report

RESUME_VARIABLE = "PLAYGROUND_RESUME"
POLICY_KEYS = ("checkpoint_every", "checkpoint_async", "checkpoint_keep")


@dataclass(frozen=True)
class CheckpointPolicy:
    """`every`: steps between checkpoints (0: none); `asynchronous`: written by a thread while the
    steps go on; `keep`: the newest whole ones kept."""

    every: int = 0
    asynchronous: bool = True
    keep: int = 2

    @classmethod
    def of(cls, params) -> "CheckpointPolicy":
        return cls(params.checkpoint_every, params.checkpoint_async, params.checkpoint_keep)


def check_policy(params) -> None:
    """A training node's checkpoint keys (ParamError naming the key)."""
    if params.checkpoint_every < 0:
        raise ParamError(
            "checkpoint_every", f"must be >= 0 (0: no checkpoints), got {params.checkpoint_every}"
        )
    if params.checkpoint_keep < 1:
        raise ParamError("checkpoint_keep", f"must be >= 1, got {params.checkpoint_keep}")


def identity(node: str, params, ranks: int, not_training: tuple[str, ...] = ()) -> dict:
    """What a checkpoint of `node` must match to be resumed: the world size and every parameter
    but those that do not change the training (`not_training`: the sample, the report's model, a
    baseline) and the checkpoint keys themselves."""
    skip = set(not_training) | set(POLICY_KEYS)
    return {
        "node": node,
        "world_size": ranks,
        "params": {k: v for k, v in params_to_dict(params).items() if k not in skip},
    }


@dataclass
class Resumed:
    """What a rank loaded: the checkpoint, its arrays and meta, and how long loading took."""

    checkpoint: store.Checkpoint
    arrays: dict[str, np.ndarray]
    meta: dict
    load_s: float
    loaded_at: float  # time.monotonic() when it was loaded

    @property
    def run(self) -> int:
        return self.meta["run"]

    @property
    def step(self) -> int:
        return self.meta["step"]


def load_resume(rank: int, expected: dict) -> Resumed | None:
    """This rank's part of the checkpoint the launcher named (PLAYGROUND_RESUME), checked against
    this run's identity; None when there is none (a first start)."""
    path = os.environ.get(RESUME_VARIABLE)
    if not path:
        return None
    t0 = time.perf_counter()
    checkpoint = store.open_checkpoint(path, expected, verify=False)  # the launcher verified every part
    arrays, meta = checkpoint.load(rank)
    return Resumed(checkpoint, arrays, meta, time.perf_counter() - t0, time.monotonic())


class Checkpoints:
    """One rank's checkpoints over its node's runs (module doc). `begin`, `after_step` and `end`
    are called by `train_steps` for each run, `close` by the node at the end."""

    def __init__(self, comm, policy: CheckpointPolicy, expected: dict, resumed: Resumed | None = None):
        self.comm, self.policy, self.expected = comm, policy, expected
        self.resumed = resumed
        self.writer = None
        if policy.every and comm.run_dir is not None:
            self.writer = PartWriter(
                store.checkpoints_dir(comm.run_dir),
                comm.rank,
                comm.size,
                expected,
                policy.asynchronous,
                policy.keep,
                commit_timeout_s=max(60.0, comm.timeout_s),
            )
        if self.writer is not None and resumed is not None:  # the checkpoints' figures before the restart
            self.writer.records.extend(resumed.meta.get("checkpoints", []))
        self.runs: list[dict] = []  # each run's record so far: {"steps", "digest", "snapshots"}
        self.offset = 0  # steps of the runs before the current one
        self.steps = 0  # the current run's steps
        self.first_step_at: float | None = None

    @classmethod
    def open(cls, comm, params, expected: dict) -> "Checkpoints":
        """From a training node's `Params` (its checkpoint keys) and identity; loads this rank's part
        of the checkpoint to go on from, if the launcher named one, and tells the launcher."""
        checkpoints = cls(comm, CheckpointPolicy.of(params), expected, load_resume(comm.rank, expected))
        if checkpoints.resumed is not None:
            checkpoints._tell_loaded()
        return checkpoints

    # -- the loop's hooks --------------------------------------------------------------------
    def begin(self, trainer, log, steps: int) -> int:
        """Run number len(self.runs) begins: restore what the checkpoint holds of it into `trainer`
        and `log` (a StepLog); returns the first step to train (`steps`: nothing left)."""
        run, self.steps = len(self.runs), steps
        self.runs.append({"steps": log.steps, "digest": "", "snapshots": log.snapshots})
        r = self.resumed
        if r is None or run > r.run:
            return 0
        saved = r.meta["runs"][run]
        log.steps.extend(saved["steps"])
        log.digest = self.runs[-1]["digest"] = saved["digest"]
        log.snapshots.extend(r.arrays[f"snapshot.{run}.{i}"] for i in range(saved["snapshots"]))
        if run < r.run:
            return steps
        restore(trainer, r.arrays)
        return r.step

    def after_step(self, step: int, trainer, log) -> None:
        """Step `step` of the current run is done and checked: save if it is time."""
        self.runs[-1]["digest"] = log.digest
        if self.resumed is not None and self.first_step_at is None:
            self.first_step_at = time.monotonic()
            self._tell_first_step(log)
        done = self.offset + step + 1
        if self.writer is not None and (done % self.policy.every == 0 or step + 1 == self.steps):
            self.writer.save(
                done,
                self._arrays(trainer),
                self._meta(step + 1),
                {"run": len(self.runs) - 1, "step": step + 1},
            )

    def end(self) -> None:
        self.offset += self.steps

    def abandon(self) -> None:
        """A peer failed: the checkpoint in flight is given up (`PartWriter.abandon`)."""
        if self.writer is not None:
            self.writer.abandon()

    def close(self, ok: bool = True) -> dict:
        """Finish the checkpoint in flight (not waiting for other ranks when the run failed); the
        checkpoints' figures for the node's record."""
        if self.writer is None:
            return {}
        self.writer.close(wait=ok)
        return self.writer.summary()

    # -- what a part holds -------------------------------------------------------------------
    def _arrays(self, trainer) -> dict[str, np.ndarray]:
        arrays = {"params": trainer.model.params}
        arrays.update({f"strategy.{k}": v for k, v in trainer.gradients.state().items()})
        for run, record in enumerate(self.runs):
            arrays.update({f"snapshot.{run}.{i}": s for i, s in enumerate(record["snapshots"])})
        return arrays

    def _meta(self, step: int) -> dict:
        return {
            "run": len(self.runs) - 1,
            "step": step,
            "global_step": self.offset + step,
            "rank": self.comm.rank,
            "checkpoints": [dict(r) for r in self.writer.records] if self.writer is not None else [],
            "runs": [
                {"steps": list(r["steps"]), "digest": r["digest"], "snapshots": len(r["snapshots"])}
                for r in self.runs
            ],
        }

    def _tell_loaded(self) -> None:
        """Tell the launcher this rank is back: its checkpoint and how long loading it took."""
        r = self.resumed
        assert r is not None
        self.comm.notify(
            {
                "type": "resumed",
                "rank": self.comm.rank,
                "step": r.checkpoint.step,
                "load_s": r.load_s,
                "loaded_at": r.loaded_at,
            }
        )

    def _tell_first_step(self, log) -> None:
        """And when its first step after the load ended, beside its usual step (warm-up)."""
        r = self.resumed
        assert r is not None
        before = [s["step_s"] for s in log.steps[: r.step] if "step_s" in s]
        self.comm.notify(
            {
                "type": "resumed",
                "rank": self.comm.rank,
                "step": r.checkpoint.step,
                "first_step_at": self.first_step_at,
                "first_step_s": log.steps[-1].get("step_s", 0.0),
                "usual_step_s": statistics.median(before) if before else None,
            }
        )


def restore(trainer, arrays: dict[str, np.ndarray]) -> None:
    """The trainer's parameters and its mode's state as saved."""
    params = trainer.model.params
    saved = arrays["params"]
    if saved.shape != params.shape or saved.dtype != params.dtype:
        raise CheckpointRefused(
            "checkpoint",
            "params",
            f"its parameters are {saved.dtype} x {saved.size}, this rank's {params.dtype} x {params.size}",
        )
    params[:] = saved
    trainer.gradients.load_state(
        {k.removeprefix("strategy."): v for k, v in arrays.items() if k.startswith("strategy.")}
    )


def with_checkpoints(report: Report, results: list[dict], every: int) -> Report:
    """`report` with a line on the run's checkpoints (how many, their size, the stall they cost the
    step against the write's own time) and every rank's figures in result.json ("checkpoints")."""
    figures = [r.get("checkpoints") or {} for r in results]
    if not every or not any(f.get("count") for f in figures):
        return report
    stalls = [f["stall_s"]["median"] for f in figures if f.get("stall_s")]
    worst = max((f["stall_s"]["max"] for f in figures if f.get("stall_s")), default=0.0)
    writes = [f["write_s"]["median"] for f in figures if f.get("write_s")]
    first = figures[0]
    how = "asynchronous: copied, then written by a thread" if first["asynchronous"] else "synchronous"
    note = (
        f"checkpoints: {first['count']} every {every} steps and at each run's end, "
        f"{format_size(max(f.get('bytes', 0) for f in figures))} per rank; the step stood still "
        f"{1e3 * max(stalls):.2f} ms for each (the slowest rank's median; longest {1e3 * worst:.2f} ms), "
        f"the write itself took {1e3 * max(writes, default=0.0):.2f} ms ({how}); "
        f"{first.get('committed', 0)} made whole by rank 0's manifest"
    )
    return dataclasses.replace(
        report, notes=[*report.notes, note], data={**report.data, "checkpoints": figures}
    )
