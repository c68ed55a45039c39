"""A rank's checkpoint parts written while its training goes on, and the manifest that makes each
checkpoint whole.

`save(step, arrays, meta)`:

- asynchronous (the default, as PyTorch DCP's `async_save`): wait for the previous checkpoint's
  write if it still runs (back-pressure: at most one in flight), copy the arrays (the snapshot: the
  only time the step stands still for it), and hand the copies to a thread that encodes them,
  takes their SHA-256, writes the part (`store.write_part`: temporary name, fsync, rename) and
  returns; training goes on meanwhile;
- synchronous: all of that in the caller, the snapshot skipped.

The committing rank (rank 0) then waits, in the same thread (or the caller, synchronously), for
every rank's part record to appear (each is written only once its part is whole on the disk), writes
the manifest and removes the checkpoints older than the newest `keep` (`store.sweep`). A rank that
dies mid-write leaves no part record, so no manifest is written: the checkpoint is ignored and the
previous one stays the newest whole. If every part was written but rank 0 died before its manifest,
the launcher writes it (`store.complete`).

Each checkpoint's record (`records`): its step, the stall (how long `save` held the caller), the
write's own time, the commit's wait, its bytes, and whether it was committed here.
"""

import threading
import time
from pathlib import Path

import numpy as np

from playground.checkpoint import store

COMMIT_POLL_S = 0.005  # how often the committing rank looks for the other ranks' part records


class PartWriter:
    """This rank's checkpoints under `root` (a run's checkpoints folder); `identity` goes into each
    manifest (what run a checkpoint belongs to)."""

    def __init__(
        self,
        root: Path,
        rank: int,
        world_size: int,
        identity: dict,
        asynchronous: bool = True,
        keep: int = 2,
        commit_timeout_s: float = 60.0,
    ):
        self.root, self.rank, self.world_size, self.identity = Path(root), rank, world_size, identity
        self.asynchronous, self.keep, self.commit_timeout_s = asynchronous, keep, commit_timeout_s
        self.commits = rank == 0
        self.records: list[dict] = []
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()

    def save(self, step: int, arrays: dict[str, np.ndarray], meta: dict, position: dict) -> dict:
        """Checkpoint `step` (global: steps trained so far): this rank's `arrays` and `meta`
        (JSON-able, not changed afterwards by the caller); returns its record (filled in as the
        write goes on)."""
        t0 = time.perf_counter()
        self._join()
        record: dict = {"step": step, "asynchronous": self.asynchronous}
        self.records.append(record)
        if self.asynchronous:
            copies = {k: np.array(v, copy=True) for k, v in arrays.items()}
            self._thread = threading.Thread(
                target=self._write,
                args=(step, copies, meta, position, record),
                name=f"checkpoint-writer-{self.rank}",
                daemon=True,
            )
            self._thread.start()
        else:
            self._write(step, arrays, meta, position, record)
            self._raise()
        record["stall_s"] = time.perf_counter() - t0
        return record

    def _write(self, step: int, arrays: dict, meta: dict, position: dict, record: dict) -> None:
        try:
            t0 = time.perf_counter()
            directory = store.step_dir(self.root, step)
            part = store.write_part(directory, self.rank, arrays, meta, position)
            record["write_s"], record["bytes"] = time.perf_counter() - t0, part.num_bytes
            if self.commits:
                t1 = time.perf_counter()
                record["committed"] = self._commit(directory, step, position)
                record["commit_s"] = time.perf_counter() - t1
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread at the next save or close
            self._error = e

    def _commit(self, directory: Path, step: int, position: dict) -> bool:
        """Wait for every rank's part, then the manifest and the pruning; False if they did not all
        come within the timeout (or the writer was closed without waiting): no manifest, not whole."""
        deadline = time.monotonic() + self.commit_timeout_s
        while (parts := store.written_parts(directory, self.world_size)) is None:
            if time.monotonic() > deadline or self._stop.wait(COMMIT_POLL_S):
                return False
        store.write_manifest(directory, step, self.identity, parts, position)
        store.sweep(self.root, keep_whole=self.keep, up_to=step)
        return True

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self, wait: bool = True) -> None:
        """Finish the checkpoint in flight (its error raised here); `wait=False` (the run is failing):
        stop waiting for other ranks' parts and leave at once."""
        if not wait:
            self._stop.set()
            return
        self._join()

    def abandon(self) -> None:
        """Stop waiting for the checkpoint in flight: a peer failed and the group re-forms live
        (training/live.py), so the dead rank's part may never come. Without every part it gets no
        manifest and is not whole; the next save goes on as usual."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._stop.clear()

    def summary(self) -> dict:
        """The checkpoints' figures for a report: how many, bytes, stall and write (median, max)."""
        return summarize(self.records)


def summarize(records: list[dict]) -> dict:
    def stats(key: str) -> dict:
        values = sorted(r[key] for r in records if key in r)
        if not values:
            return {}
        return {"median": values[len(values) // 2], "max": values[-1]}

    return {
        "count": len(records),
        "bytes": max((r.get("bytes", 0) for r in records), default=0),
        "asynchronous": records[0]["asynchronous"] if records else None,
        "stall_s": stats("stall_s"),
        "write_s": stats("write_s"),
        "commit_s": stats("commit_s"),
        "committed": sum(1 for r in records if r.get("committed")),
    }
