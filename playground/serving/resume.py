"""What a serving run keeps in its run directory, so that a run restarted after a failure (its
engine rank killed, a client rank lost) goes on without losing a request or answering one twice:

- each setup's finished-id table, `serving-state/setup-<k>.jsonl` (kvcache/server/answers.py):
  the server started again for that setup answers from it every request its predecessor finished,
  and generates only the others, from their prompts;
- each finished setup's result, `serving-state/setup-<k>.json`, written (a temporary file, renamed)
  once every client has reported: a restarted run begins at the first setup without one;
- tensor-parallel serving (nodes/serving_tensor.py): each rank's finished rounds, one JSON line a
  round in `serving-state/tensor-rank-<r>.jsonl` (after a line saying it started); a restarted run
  goes on at the first round some rank has not finished, and runs the decode batch of that round
  again from its prompts (a killed shard took its KV with it).

The client ranks keep their routing ids (`rank-<r>`) and name each request after what it is (the
workload's key), so a restarted client re-sends the same ids and the journal recognises them. A run
that is never restarted writes these files too (one journal line per answered request) and reads
nothing back: its run directory is new.
"""

import json
import os
from pathlib import Path

STATE = "serving-state"


def journal(run_dir: Path | None, k: int) -> Path | None:
    """Setup k's journal (None without a run directory: nothing is kept)."""
    if run_dir is None:
        return None
    (run_dir / STATE).mkdir(exist_ok=True)
    return run_dir / STATE / f"setup-{k}.jsonl"


def finished(run_dir: Path | None, num_setups: int) -> list[dict]:
    """The results of the setups a previous start of this run finished, in order (the first
    missing one ends the list)."""
    done: list[dict] = []
    for k in range(num_setups):
        path = run_dir / STATE / f"setup-{k}.json" if run_dir is not None else None
        if path is None or not path.exists():
            break
        done.append(json.loads(path.read_text()))
    return done


def save(run_dir: Path | None, k: int, result: dict) -> None:
    if run_dir is None:
        return
    path = run_dir / STATE / f"setup-{k}.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)


def rounds_done(comm) -> tuple[list[dict], int]:
    """This rank's finished tensor-serving rounds, cut to the fewest any rank finished (a rank
    killed between two ranks' writes: the round is run again by every rank), and how many rounds
    were started before and not kept: run again now."""
    path = _rounds_path(comm)
    mine, started = [], 0
    if path is not None and path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                break  # a torn last line
            if "started" in entry:
                started = max(started, entry["started"] + 1)
            else:
                mine.append(entry)
    fewest = min(comm.allgather_obj(len(mine)))
    if path is not None and (len(mine) > fewest or started > fewest):
        path.write_text("".join(json.dumps(r) + "\n" for r in mine[:fewest]))
    return mine[:fewest], max(0, started - fewest)


def round_started(comm, index: int) -> None:
    _append(comm, {"started": index})


def round_done(comm, record: dict) -> None:
    _append(comm, record)


def _append(comm, entry: dict) -> None:
    path = _rounds_path(comm)
    if path is not None:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def _rounds_path(comm) -> Path | None:
    if comm.run_dir is None:
        return None
    (comm.run_dir / STATE).mkdir(exist_ok=True)
    return comm.run_dir / STATE / f"tensor-rank-{comm.rank}.jsonl"
