"""Checkpoints on disk: a directory per step, each rank's part whole or absent, a manifest last.

    RUN_DIR/checkpoints/step-0000100/
        part-0.npz       rank 0's arrays and its meta (JSON), an .npz without pickle
        part-0.json      the part's size and SHA-256, written once the part is on the disk
        ...
        manifest.json    written last, once every rank's part is on the disk: every part's
                         checksum, the step, the world size and the run's identity (model, mode...)

Every file is written under a temporary name in its directory, flushed (fsync), renamed over its
own name (atomic in POSIX) and the directory flushed, so a crash at any moment leaves the old state
or the new, never half a file under the real name. A checkpoint is **whole** when its manifest
exists and every part's SHA-256 matches it; any other is ignored by `newest_whole`, which says why
it skipped each one, and removed by `sweep` once no writer can be alive. A checkpoint of another run
(its `identity`: model, world size, mode, ...) is refused naming the first key that differs.

This is PyTorch DCP's shape (each rank writes its own storage, the coordinator rank writes the
metadata last), with the checksums that make "whole" something a reader can check.
"""

import hashlib
import io
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from playground.core.errors import CheckpointRefused

CHECKPOINTS = "checkpoints"  # the folder of a run directory that holds them
MANIFEST = "manifest.json"
FORMAT = 1  # the manifest's format; another one is refused
TMP_MARK = ".tmp-"  # a file being written: .NAME.tmp-PID


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def step_dir(root: Path, step: int) -> Path:
    """The directory of the checkpoint after `step` steps (zero-padded: names sort as steps)."""
    return Path(root) / f"step-{step:07d}"


def part_name(rank: int) -> str:
    return f"part-{rank}.npz"


def write_atomic(path: Path, data: bytes) -> None:
    """`data` under `path`, whole or not at all: a temporary name, fsync, rename, fsync the folder."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    sync_dir(path.parent)


def sync_dir(directory: Path) -> None:
    """Flush a directory's entries (a rename is durable only then)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def encode_part(arrays: dict[str, np.ndarray], meta: dict) -> bytes:
    """An .npz of `arrays` and `meta` (as JSON under "meta"): loadable with numpy alone, no pickle."""
    buffer = io.BytesIO()
    named: dict[str, Any] = {"meta": np.array(json.dumps(meta)), **arrays}
    np.savez(buffer, **named)
    return buffer.getvalue()


def decode_part(data: bytes) -> tuple[dict[str, np.ndarray], dict]:
    with np.load(io.BytesIO(data), allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files if k != "meta"}  # as saved (0-d stays 0-d)
        meta = json.loads(str(f["meta"]))
    return arrays, meta


@dataclass(frozen=True)
class Part:
    """A rank's part as the manifest lists it."""

    rank: int
    file: str
    sha256: str
    num_bytes: int

    def to_dict(self) -> dict:
        return {"rank": self.rank, "file": self.file, "sha256": self.sha256, "bytes": self.num_bytes}


def write_part(
    directory: Path, rank: int, arrays: dict[str, np.ndarray], meta: dict, position: dict | None = None
) -> Part:
    """Rank `rank`'s part in `directory` (made if needed), then its record beside it (part-R.json,
    with the checkpoint's `position`): a part with a record is on the disk whole."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    data = encode_part(arrays, meta)
    part = Part(rank, part_name(rank), hashlib.sha256(data).hexdigest(), len(data))
    write_atomic(directory / part.file, data)
    record = {**part.to_dict(), "position": position or {}}
    write_atomic(directory / f"part-{rank}.json", json.dumps(record).encode())
    return part


def part_records(directory: Path, world_size: int) -> list[dict] | None:
    """Every rank's part record in `directory`, or None while one is missing."""
    records = []
    for rank in range(world_size):
        try:
            records.append(json.loads((Path(directory) / f"part-{rank}.json").read_text()))
        except (OSError, ValueError):
            return None
    return records


def written_parts(directory: Path, world_size: int) -> list[Part] | None:
    """Every rank's part as its record lists it, or None while one is missing."""
    records = part_records(directory, world_size)
    if records is None:
        return None
    return [Part(r["rank"], r["file"], r["sha256"], r["bytes"]) for r in records]


def complete(directory: Path, identity: dict) -> bool:
    """Write the manifest of a checkpoint whose every part is on the disk, whole, but whose committing
    rank died before it wrote it: every rank had done its part, so the commit stands (what a
    two-phase commit's recovery does when every participant voted yes). Only once no writer lives
    (the launcher, between generations). False when a part is missing, torn or its records disagree."""
    directory = Path(directory)
    world_size = identity.get("world_size")
    if (directory / MANIFEST).exists() or not isinstance(world_size, int):
        return False
    records = part_records(directory, world_size)
    if records is None or len({json.dumps(r.get("position"), sort_keys=True) for r in records}) != 1:
        return False
    parts = [Part(r["rank"], r["file"], r["sha256"], r["bytes"]) for r in records]
    for part in parts:
        try:
            if hashlib.sha256((directory / part.file).read_bytes()).hexdigest() != part.sha256:
                return False
        except OSError:
            return False
    write_manifest(directory, step_of(directory), identity, parts, records[0]["position"])
    return True


def write_manifest(directory: Path, step: int, identity: dict, parts: list[Part], position: dict) -> None:
    """The manifest, last: what makes the checkpoint whole. `position` says where in the run it is
    (the node's run and its step), `identity` what run it belongs to."""
    manifest = {
        "format": FORMAT,
        "step": step,
        "world_size": len(parts),
        "identity": identity,
        "position": position,
        "parts": [p.to_dict() for p in parts],
    }
    write_atomic(Path(directory) / MANIFEST, json.dumps(manifest, indent=1).encode())


@dataclass(frozen=True)
class Checkpoint:
    """A whole checkpoint: its directory and its manifest."""

    path: Path
    manifest: dict

    @property
    def step(self) -> int:
        return self.manifest["step"]

    @property
    def world_size(self) -> int:
        return self.manifest["world_size"]

    @property
    def position(self) -> dict:
        return self.manifest.get("position") or {}

    def part(self, rank: int) -> Part:
        p = self.manifest["parts"][rank]
        return Part(p["rank"], p["file"], p["sha256"], p["bytes"])

    def load(self, rank: int) -> tuple[dict[str, np.ndarray], dict]:
        """Rank `rank`'s (arrays, meta), its checksum checked again (the disk may have changed since)."""
        return decode_part(self._read_checked(self.part(rank)))

    def _read_checked(self, part: Part) -> bytes:
        path = self.path / part.file
        try:
            data = path.read_bytes()
        except OSError as e:
            raise CheckpointRefused(
                self.path, part.file, f"{part.file} cannot be read ({e.strerror})"
            ) from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != part.sha256:
            raise CheckpointRefused(
                self.path,
                part.file,
                f"{part.file} has SHA-256 {digest[:12]}..., its manifest says {part.sha256[:12]}... (corrupted)",
                digest,
                part.sha256,
            )
        return data

    def verify(self) -> None:
        """Every part read and checked against the manifest (CheckpointRefused naming the first not)."""
        for rank in range(self.world_size):
            self._read_checked(self.part(rank))


def open_checkpoint(path: str | Path, identity: dict | None = None, verify: bool = True) -> Checkpoint:
    """The checkpoint at `path`, whole (every part's checksum checked, unless `verify` is False)
    and, given `identity`, of this run: else CheckpointRefused saying what is wrong."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        raise CheckpointRefused(
            path, MANIFEST, "no manifest: not a whole checkpoint (torn, or still being written)"
        ) from None
    except (OSError, ValueError) as e:
        raise CheckpointRefused(path, MANIFEST, f"its manifest cannot be read: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise CheckpointRefused(
            path, "format", f"manifest format {found!r}, this version reads {FORMAT}", found, FORMAT
        )
    checkpoint = Checkpoint(path, manifest)
    if identity is not None:
        check_identity(path, {"world_size": checkpoint.world_size, **manifest.get("identity", {})}, identity)
    if verify:
        checkpoint.verify()
    return checkpoint


def flatten(d: dict, prefix: str = "") -> dict:
    """{"model": {"d_model": 64}} -> {"model.d_model": 64}."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_identity(path: Path, found: dict, expected: dict) -> None:
    """CheckpointRefused naming the first key of `expected` whose value in the checkpoint differs."""
    have, want = flatten(found), flatten(expected)
    for key, value in want.items():
        if have.get(key) != value:
            raise CheckpointRefused(
                path,
                key,
                f"a checkpoint of another run: {key} is {have.get(key)!r} in it, {value!r} in this run",
                have.get(key),
                value,
            )


def candidates(root: Path) -> list[Path]:
    """The checkpoint directories under `root`, newest step first."""
    try:
        dirs = [p for p in Path(root).iterdir() if p.is_dir() and re.fullmatch(r"step-\d+", p.name)]
    except OSError:
        return []
    return sorted(dirs, key=step_of, reverse=True)


def step_of(path: Path) -> int:
    return int(path.name.removeprefix("step-"))


def not_whole(e: CheckpointRefused) -> bool:
    """Whether a refusal says the checkpoint is not whole (torn, or a part corrupted), as opposed to
    one of another run or format: an older one may then still be whole."""
    return e.what == MANIFEST or e.what.startswith("part-")


def newest_whole(root: Path, identity: dict | None = None) -> tuple[Checkpoint | None, list[str]]:
    """The newest whole checkpoint under `root` (of this run, given `identity`), and one line per
    newer one skipped, saying why. A checkpoint of another run is refused, not skipped: an older one
    would belong to the same other run."""
    skipped: list[str] = []
    for path in candidates(root):
        try:
            return open_checkpoint(path, identity), skipped
        except CheckpointRefused as e:
            if not not_whole(e):
                raise
            skipped.append(str(e))
    return None, skipped


def sweep(root: Path, keep_whole: int | None = None, up_to: int | None = None) -> list[Path]:
    """Remove what no reader should see: files left half-written (`.NAME.tmp-PID`), checkpoints that
    are not whole (no manifest) and, with `keep_whole`, the whole ones but the newest `keep_whole`.
    Only where no writer can still be at work: everything once every rank is gone (the launcher,
    between generations), or, with `up_to`, the checkpoints of at most that step once it is whole
    (every rank has written every part before it). Returns the directories removed."""
    removed = []
    whole = 0
    for path in candidates(root):
        if up_to is not None and step_of(path) > up_to:
            continue
        if (path / MANIFEST).exists():
            whole += 1
            for tmp in path.glob(f".*{TMP_MARK}*"):
                tmp.unlink(missing_ok=True)
            if keep_whole is None or whole <= keep_whole:
                continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def discard_after(root: Path, step: int | None) -> list[Path]:
    """Remove every checkpoint newer than `step` (all of them for None): what a restarted group will
    write again. A newer one is torn or refused (else it would have been chosen), and a part record
    left in it would pass for the new group's."""
    removed = [p for p in candidates(root) if step is None or step_of(p) > step]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
