"""What a run says of its restarts: the table of each restart's times, and `run --resume`'s check.

The restarts table is the supervisor's records (`supervise.Restart`): how the group went on (`way`:
restart from a checkpoint, or peer, a replacement copying a survivor's state), which rank failed and
why, the step it had reached, the checkpoint the group went on from, the steps redone, and the time
to recover split into detection, teardown, restart and rendezvous (peer: re-form), checkpoint load
(peer: the state's transfer) and warm-up, so that the two ways read side by side.
"""

import dataclasses
from pathlib import Path

from playground.checkpoint import store
from playground.config.scenario import Scenario
from playground.core.errors import CheckpointRefused
from playground.display.report import Report, Table

COLUMNS = {
    "restart": "restart",
    "way": "way",
    "rank": "rank",
    "step_reached": "reached",
    "checkpoint_step": "from",
    "steps_redone": "redone",
    "detection_s": "detect (s)",
    "teardown_s": "teardown (s)",
    "restart_s": "restart / re-form (s)",
    "load_s": "load / transfer (s)",
    "warmup_s": "warm-up (s)",
    "total_s": "total (s)",
}
LEGEND = {
    "step_reached": "the last step done before the failure (rank 0's)",
    "way": "restart: every rank started again from a checkpoint; peer: the failed rank replaced, the survivors kept; shrink: the survivors go on as fewer ranks (recovery.way)",
    "checkpoint_step": "the checkpoint the group went on from (its step); - : from the start, or a peer's state",
    "steps_redone": "restart: the checkpoint's step to the step reached; peer: the most steps a rank did again (the step in flight dropped)",
    "detection_s": "the fault to the launcher's first failure (a drill's fault only: a kill from outside has no known time)",
    "restart_s": "teardown's end to every rank of the new group registered: the checkpoint chosen and verified, the ranks forked (peer: the replacement forked, the survivors re-formed)",
    "load_s": "the slowest rank's read of its checkpoint part (peer: the agreement on the newest step and the state's transfer)",
    "warmup_s": "the load's end to the first step's, less one usual step: model and threads built again, cold caches",
}


def restarts_table(restarts: list[dict]) -> Table:
    rows = [
        {"restart": k + 1, **{key: r.get(key) for key in COLUMNS if key != "restart"}}
        for k, r in enumerate(restarts)
    ]
    return Table("Restarts", rows, COLUMNS, keys=("restart",), legend=LEGEND)


def with_restarts(report: Report, outcome, resume: store.Checkpoint | None) -> Report:
    """`report` with the restarts table and one line per restart saying why, and where a resumed
    run went on from."""
    notes = [
        f"restart {k + 1} ({r.get('way', 'restart')}): {r['why']}" for k, r in enumerate(outcome.restarts)
    ]
    if resume is not None:
        notes.insert(0, f"resumed from the checkpoint after step {resume.step} ({resume.path})")
    tables = [*report.tables, restarts_table(outcome.restarts)] if outcome.restarts else report.tables
    return dataclasses.replace(report, tables=tables, notes=[*report.notes, *notes])


def resume_checkpoint(scenario: Scenario, run_dir: Path) -> tuple[store.Checkpoint, list[str]]:
    """The checkpoint `run --resume RUN_DIR` goes on from: the newest whole one of this run in
    RUN_DIR, every part's checksum checked, and a line for each newer one skipped (torn, corrupted);
    CheckpointRefused (one line, exit 2) when there is none, or when it belongs to another run
    (naming what differs: world size, model, mode...)."""
    contract = scenario.contract
    root = store.checkpoints_dir(run_dir)
    if contract.checkpoint_identity is None:
        raise CheckpointRefused(run_dir, "node", f"node {scenario.node} writes no checkpoints to go on from")
    identity = contract.checkpoint_identity(scenario.params, scenario.ranks)
    found, skipped = store.newest_whole(root, identity)
    if found is None:
        why = f" ({'; '.join(skipped)})" if skipped else ""
        raise CheckpointRefused(root, "checkpoint", f"no whole checkpoint to go on from{why}")
    store.discard_after(root, found.step)  # torn or refused: the resumed run writes them again
    store.sweep(root)
    return found, skipped
