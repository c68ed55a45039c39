"""Checkpoints on disk (playground/checkpoint): whole or ignored, checksums, identity, the writer.

A torn checkpoint (its writer killed mid-write, or before the manifest) and a corrupted one (one
byte flipped) are never loaded: the previous whole one is."""

import json
import multiprocessing
import os
import signal

import numpy as np
import pytest

from playground.checkpoint import store
from playground.checkpoint.writer import PartWriter
from playground.core.errors import CheckpointRefused

IDENTITY = {"model": {"layers": 1, "d_model": 16}, "mode": "bucketed"}


def save(root, step: int, world_size: int = 2, value: float = 0.0) -> None:
    """A whole checkpoint of `world_size` ranks at `step`, each part's params = value + rank."""
    directory = store.step_dir(root, step)
    parts = [
        store.write_part(directory, r, {"params": np.full(8, value + r)}, {"step": step, "rank": r})
        for r in range(world_size)
    ]
    store.write_manifest(directory, step, IDENTITY, parts, {"run": 0, "step": step})


def test_a_whole_checkpoint_loads_each_ranks_part_with_its_meta(tmp_path):
    save(tmp_path, 10, value=1.0)
    found, skipped = store.newest_whole(tmp_path, {"world_size": 2, **IDENTITY})
    assert skipped == [] and found is not None and found.step == 10
    arrays, meta = found.load(1)
    assert np.array_equal(arrays["params"], np.full(8, 2.0)) and meta == {"step": 10, "rank": 1}
    assert found.position == {"run": 0, "step": 10}
    assert not list(tmp_path.rglob(f"*{store.TMP_MARK}*"))  # every temporary name renamed away


def test_one_flipped_byte_is_refused_naming_the_part_and_the_previous_checkpoint_is_used(tmp_path):
    save(tmp_path, 10, value=1.0)
    save(tmp_path, 20, value=2.0)
    part = store.step_dir(tmp_path, 20) / "part-1.npz"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))
    with pytest.raises(
        CheckpointRefused, match=r"part-1.npz has SHA-256 .* its manifest says .* \(corrupted\)"
    ):
        store.open_checkpoint(store.step_dir(tmp_path, 20))
    found, skipped = store.newest_whole(tmp_path)
    assert found is not None and found.step == 10
    assert len(skipped) == 1 and "step-0000020" in skipped[0] and "corrupted" in skipped[0]


def test_a_checkpoint_without_its_manifest_is_not_whole_and_is_swept(tmp_path):
    save(tmp_path, 10)
    directory = store.step_dir(tmp_path, 20)
    store.write_part(directory, 0, {"params": np.zeros(8)}, {})  # rank 1 never wrote: no manifest
    found, skipped = store.newest_whole(tmp_path)
    assert found.step == 10 and "no manifest" in skipped[0]
    assert store.sweep(tmp_path) == [directory]
    assert [p.name for p in store.candidates(tmp_path)] == ["step-0000010"]


@pytest.mark.parametrize(
    "identity, key",
    [
        ({"world_size": 4, **IDENTITY}, "world_size"),
        ({"world_size": 2, "model": {"layers": 1, "d_model": 32}, "mode": "bucketed"}, "model.d_model"),
        ({"world_size": 2, "model": IDENTITY["model"], "mode": "zero1"}, "mode"),
    ],
)
def test_a_checkpoint_of_another_run_is_refused_in_one_line_naming_what_differs(tmp_path, identity, key):
    save(tmp_path, 10)
    with pytest.raises(CheckpointRefused) as e:
        store.newest_whole(tmp_path, identity)
    assert e.value.what == key and "\n" not in str(e.value)
    assert f"a checkpoint of another run: {key} is " in str(e.value)


def test_pruning_keeps_the_newest_whole_ones_and_never_a_newer_one_being_written(tmp_path):
    for step in (10, 20, 30):
        save(tmp_path, step)
    newer = store.step_dir(tmp_path, 40)
    store.write_part(newer, 1, {"params": np.zeros(8)}, {})  # another rank already writes step 40
    store.sweep(tmp_path, keep_whole=2, up_to=30)
    assert [p.name for p in store.candidates(tmp_path)] == ["step-0000040", "step-0000030", "step-0000020"]


def _write_then_hang(directory: str) -> None:
    """A writer whose fsync never returns: its bytes are written under the temporary name only."""
    os.fsync = lambda fd: signal.pause()
    store.write_part(directory, 0, {"params": np.ones(1 << 16)}, {})


@pytest.mark.timeout(20)
def test_a_writer_killed_mid_write_leaves_a_torn_part_that_is_never_loaded(tmp_path):
    save(tmp_path, 10, world_size=1)
    directory = store.step_dir(tmp_path, 20)
    directory.mkdir()
    child = multiprocessing.get_context("fork").Process(target=_write_then_hang, args=(str(directory),))
    child.start()
    try:
        while not list(directory.glob(f".part-0.npz{store.TMP_MARK}*")):  # its bytes are on their way
            child.join(0.01)
            assert child.exitcode is None
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join()
    assert not (directory / "part-0.npz").exists()  # the real name never held half a part
    found, skipped = store.newest_whole(tmp_path)
    assert found.step == 10 and "no manifest" in skipped[0]
    store.sweep(tmp_path)
    assert not directory.exists()


@pytest.mark.parametrize("asynchronous", [True, False])
def test_the_writer_commits_once_every_rank_has_written_and_keeps_the_newest(tmp_path, asynchronous):
    writers = [PartWriter(tmp_path, r, 2, IDENTITY, asynchronous, keep=2) for r in (1, 0)]
    for step in (1, 2, 3):
        for w in writers:
            params = np.full(4, float(step))
            w.save(step, {"params": params}, {"rank": w.rank}, {"run": 0, "step": step})
            params[:] = -1  # the caller goes on: an asynchronous write took its copy
    for w in writers:
        w.close()
    found, _ = store.newest_whole(tmp_path)
    assert found.step == 3 and np.array_equal(found.load(1)[0]["params"], np.full(4, 3.0))
    assert [p.name for p in store.candidates(tmp_path)] == ["step-0000003", "step-0000002"]
    rank0 = writers[1]
    assert [r["committed"] for r in rank0.records] == [True, True, True]
    summary = rank0.summary()
    assert summary["count"] == 3 and summary["asynchronous"] is asynchronous and summary["bytes"] > 0
    assert json.loads((found.path / store.MANIFEST).read_text())["identity"] == IDENTITY


def test_a_commit_whose_peer_never_writes_leaves_no_manifest(tmp_path):
    writer = PartWriter(tmp_path, 0, 2, IDENTITY, asynchronous=False, commit_timeout_s=0.05)
    record = writer.save(5, {"params": np.zeros(2)}, {}, {})
    assert record["committed"] is False
    assert store.newest_whole(tmp_path)[0] is None
