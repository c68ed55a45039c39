"""The shared-memory data path: ring-buffer bookkeeping, and real runs that go through it."""

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from tools import owned_scratch, run_owned

from playground.cli.testing import start_cli
from playground.comm.shm import ShmChannels

TESTS = Path(__file__).resolve().parent


def try_put(sender: ShmChannels, x: np.ndarray) -> bytes | None:
    """What the communicator does with a ring slot for rank 1: copy in, keep the descriptor."""
    got = sender.try_alloc(1, x.nbytes)
    if got is None:
        return None
    view, descriptor = got
    view[:] = x.view(np.uint8)
    return descriptor


@pytest.fixture
def channels(tmp_path):
    sender = ShmChannels(0, str(tmp_path), capacity_bytes=64 + 1024)
    receiver = ShmChannels(1, str(tmp_path))
    yield sender, receiver
    sender.close()
    receiver.close()


def test_bytes_arrive_and_space_is_reused(channels):
    sender, receiver = channels
    for k in range(10):  # ten times the ring's capacity in total: space must be handed back
        x = np.arange(100, dtype=np.float64) + k
        desc = try_put(sender, x)
        assert desc is not None
        view, end = receiver.arrived(0, desc)
        assert np.array_equal(view.view(np.float64), x)
        receiver.release(0, end)


def test_full_ring_refuses_instead_of_waiting(channels):
    sender, receiver = channels
    a = try_put(sender, np.ones(96, dtype=np.float64))  # 768 bytes
    assert a is not None
    assert try_put(sender, np.ones(64, dtype=np.float64)) is None  # 512 more do not fit: the caller waits
    view, end = receiver.arrived(0, a)
    receiver.release(0, end)
    assert try_put(sender, np.ones(64, dtype=np.float64)) is not None


def test_release_out_of_order_frees_only_a_prefix(channels):
    sender, receiver = channels
    d1 = try_put(sender, np.full(32, 1.0))  # 256 B each
    d2 = try_put(sender, np.full(32, 2.0))
    v1, e1 = receiver.arrived(0, d1)
    v2, e2 = receiver.arrived(0, d2)
    receiver.release(0, e2)  # the later message is done first (another tag was waited for)
    assert try_put(sender, np.ones(75)) is None  # 600 B: the first message is still unread, no room
    assert np.array_equal(v1.view(np.float64), np.full(32, 1.0))
    receiver.release(0, e1)
    assert try_put(sender, np.ones(75)) is not None


@pytest.fixture(scope="module")
def another_run(tmp_path_factory):
    """Another playground run over shared memory, alive while this module's runs come and go (as
    a user's run, or another test's, may be on any machine): its /dev/shm directory, which holds
    ring files too. Each run here must count only its own leftovers and leave this one's alone;
    stopped with Ctrl-C at the end, it must leave nothing either."""
    out = tmp_path_factory.mktemp("beside")
    scenario = out / "beside.yaml"
    scenario.write_text("name: beside\nnode: usernode_beside:main\nranks: 2\ntransport: shm\ntimeout_s: 20\n")
    env = {"PYTHONPATH": str(TESTS), "PLAYGROUND_SHM_MIN_BYTES": "8"}
    proc = start_cli(["run", str(scenario), "--out", str(out)], env)
    try:
        deadline = time.monotonic() + 30
        while not all((out / "latest" / f"ready-{r}").exists() for r in (0, 1)):
            assert proc.poll() is None and time.monotonic() < deadline, "the run beside did not start"
            time.sleep(0.05)  # waiting for its ranks to say ready, not papering over a race
        (shm,) = [d for d in owned_scratch(proc.pid) if d.startswith("/dev/shm/")]
        assert os.path.exists(os.path.join(shm, "0-1"))
        yield shm
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stdout + stderr
    assert owned_scratch(proc.pid) == []


def run_grid(tmp_path: Path, runs_dir: Path, env: dict, **params) -> tuple[dict, list[str]]:
    """The grid node over shared memory: (result.json, what this run, by its launcher's pid, left)."""
    p = tmp_path / "g.yaml"
    ranks = params.pop("ranks")
    lines = "".join(f"  {k}: {v}\n" for k, v in params.items())
    p.write_text(
        f"name: grid\nnode: usernode_grid:main\nranks: {ranks}\ntransport: shm\ntimeout_s: 20\nparams:\n{lines}"
    )
    code, out, err, pid = run_owned(
        ["run", str(p), "--out", str(runs_dir)], {"PYTHONPATH": str(TESTS), **env}
    )
    assert code == 0, out + err
    return json.loads((runs_dir / "latest" / "result.json").read_text()), owned_scratch(pid)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
def test_grid_over_shared_memory(tmp_path, runs_dir, algorithm, another_run):
    result, left = run_grid(
        tmp_path,
        runs_dir,
        {"PLAYGROUND_SHM_MIN_BYTES": "8"},
        ranks=5,
        algorithm=algorithm,
        segment_bytes=64,
        big=3001,
    )
    assert len(result["rows"]) == 4 * 3 * len({0, 1, 4, 6, 3001})  # dtypes x ops x lengths at 5 ranks
    assert result["transport"] == "shm" and all(row["wrong"] == 0 for row in result["rows"])
    assert left == []  # its rings and pipes are gone; the run beside keeps its own
    assert os.path.exists(os.path.join(another_run, "0-1"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "ranks", [3, 8]
)  # 3: receivers poll before sleeping; 8 on 2 cores: they sleep at once
def test_grid_over_shared_memory_default_split(tmp_path, runs_dir, ranks, another_run):
    """Default thresholds: small arrays inline in mailbox records, large ones through rings (big:
    140,001 elements, whose ring chunks at 8 ranks are 70 KB in float32, above a slot's 64 KiB)."""
    result, left = run_grid(
        tmp_path, runs_dir, {}, ranks=ranks, algorithm="ring", segment_bytes=1 << 20, big=140_001
    )
    assert len(result["rows"]) == 4 * 3 * len({0, 1, ranks - 1, ranks + 1, 140_001})
    assert all(row["wrong"] == 0 for row in result["rows"])
    assert left == [] and os.path.exists(os.path.join(another_run, "0-1"))
