"""`python -m playground node`: ranks started by someone else (a shell loop, mpiexec) join one run
over tcp; rank 0 hosts the coordinator and writes result.json; a failure ends every process."""

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

import playground
from playground.cli.testing import PLAYGROUND, session_processes
from playground.comm.addresses import free_tcp_port
from playground.core.errors import ScenarioError
from playground.launcher.external import coordinator_port, run_dir_for

ROOT = Path(playground.__file__).resolve().parent.parent  # the same playground the tests imported
SMALL = ["--set", "params.sizes=[1KiB]", "--set", "params.iters=3", "--set", "params.warmup=1"]
# Whatever launched pytest must not leak into the ranks (a RANK from torchrun, a SLURM_PROCID, ...).
LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PMI_RANK",
    "PMI_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "TORCHELASTIC_RUN_ID",
    "PLAYGROUND_COORD_PORT",
    "PLAYGROUND_RUN_DIR",
    "PLAYGROUND_IPC_DIR",
    "PLAYGROUND_HOST",
    "PLAYGROUND_NETNS",
)
# srun forks a shepherd that cancels the job should srun be killed; srun tells it the job ended as
# srun exits, and it exits a moment later on its own: waited for (10 s at most), not counted as left.
SHEPHERDS = ("srun",)


def named(p: psutil.Process, names: tuple[str, ...]) -> bool:
    try:
        return p.name() in names
    except psutil.NoSuchProcess:
        return False


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return {**env, **extra}


class Ranks:
    """Processes this test started, each in its own session; `finish` waits for all of them and then
    checks (and kills) anything left behind in those sessions."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], env: dict, cwd: Path | None = None) -> subprocess.Popen:
        p = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self.procs.append(p)
        return p

    def start_nodes(
        self, n: int, out: Path, sets: list[str], names=("RANK", "WORLD_SIZE"), extra_env: dict | None = None
    ) -> int:
        """n ranks of `node ring` as a shell loop would start them, on a free MASTER_PORT (returned)."""
        port = free_tcp_port()
        for r in range(n):
            env = clean_env(
                **{names[0]: str(r), names[1]: str(n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
                **(extra_env or {}),
            )
            self.start([*PLAYGROUND, "node", "ring", "--out", str(out), *sets], env)
        return port

    def finish(self, timeout_s: float = 45) -> list[tuple[int, str, str]]:
        deadline = time.monotonic() + timeout_s
        done = []
        for p in self.procs:
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_all()
                raise AssertionError(f"rank process {p.args} did not finish within {timeout_s}s") from None
            done.append((p.returncode, out, err))
        psutil.wait_procs([q for q in self.leftovers() if named(q, SHEPHERDS)], timeout=10)
        assert not self.leftovers(), f"processes left behind: {self.leftovers()}"
        return done

    def leftovers(self) -> list[psutil.Process]:
        return session_processes(*(p.pid for p in self.procs))

    def kill_all(self) -> None:
        for q in self.leftovers():
            q.kill()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


@pytest.fixture
def ranks():
    r = Ranks()
    try:
        yield r
    finally:
        r.kill_all()


def assert_good_run(run_dir: Path, out: Path, n: int) -> None:
    result = json.loads((run_dir / "result.json").read_text())
    assert result["ok"] is True and result["ranks"] == n and result["transport"] == "tcp"
    assert [row["size"] for row in result["rows"]] == [1024]
    assert all(row["wrong"] == 0 for row in result["rows"])
    assert sorted(p.name for p in run_dir.glob("rank-*.jsonl")) == [f"rank-{r}.jsonl" for r in range(n)]
    assert (run_dir / "scenario.yaml").exists()
    assert (out / "latest").resolve() == run_dir.resolve()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 3])
def test_ranks_from_a_shell_loop_join_one_run(ranks, runs_dir, n):
    port = ranks.start_nodes(n, runs_dir, SMALL)
    done = ranks.finish()
    assert [code for code, _, _ in done] == [0] * n, done
    assert "#wrong" in done[0][1]  # rank 0 prints the table; the others stay quiet
    assert all(not out.strip() for _, out, _ in done[1:]), done
    assert_good_run(runs_dir / f"ring-{port}", runs_dir, n)


@pytest.mark.timeout(60)
def test_mpich_environment_names(ranks, runs_dir):
    port = ranks.start_nodes(2, runs_dir, SMALL, names=("PMI_RANK", "PMI_SIZE"))
    done = ranks.finish()
    assert [code for code, _, _ in done] == [0, 0], done
    assert_good_run(runs_dir / f"ring-{port}", runs_dir, 2)


@pytest.mark.timeout(60)
def test_raising_rank_fails_every_process_fast(ranks, runs_dir):
    t0 = time.monotonic()
    port = ranks.start_nodes(
        3, runs_dir, [*SMALL, "--set", "fault.rank=1", "--set", "fault.action=raise", "--set", "timeout_s=30"]
    )
    done = ranks.finish()
    elapsed = time.monotonic() - t0
    assert [code for code, _, _ in done] == [1, 1, 1], done
    assert elapsed < 15, f"took {elapsed:.1f}s: the abort must not wait for the 30 s receive timeout"
    root = next(line for line in done[0][2].splitlines() if "root cause" in line)
    assert "rank 1" in root and "FaultInjected" in root, done[0][2]
    result = json.loads((runs_dir / f"ring-{port}" / "result.json").read_text())
    assert result["ok"] is False and "rank 1" in result["failures"][0]
    assert "PeerLost" in done[2][2]  # rank 2 says it stopped because of another rank


@pytest.mark.timeout(60)
def test_killed_rank_is_found_by_timeouts(ranks, runs_dir):
    """No sentinels under another launcher: a SIGKILLed rank is found by its peers' receive timeout."""
    port = ranks.start_nodes(
        3,
        runs_dir,
        [
            *SMALL,
            "--set",
            "fault.rank=1",
            "--set",
            "fault.action=kill",
            "--set",
            "fault.after_ops=4",
            "--set",
            "timeout_s=3",
        ],
    )
    done = ranks.finish()
    assert [code for code, _, _ in done] == [1, -9, 1], done
    root = next(line for line in done[0][2].splitlines() if "root cause" in line)
    assert "rank 1" in root and "process is gone" in root, done[0][2]
    assert json.loads((runs_dir / f"ring-{port}" / "result.json").read_text())["ok"] is False


@pytest.mark.timeout(60)
def test_hung_rank_is_named_with_its_stack_and_stopped(ranks, runs_dir):
    """A hung rank on rank 0's host is blamed with its stack and killed: a shell loop would not kill it."""
    ranks.start_nodes(
        3,
        runs_dir,
        [
            *SMALL,
            "--set",
            "fault.rank=1",
            "--set",
            "fault.action=hang",
            "--set",
            "fault.after_ops=4",
            "--set",
            "timeout_s=2",
        ],
    )
    done = ranks.finish(timeout_s=30)
    assert [code for code, _, _ in done] == [1, -9, 1], done
    root = next(line for line in done[0][2].splitlines() if "root cause" in line)
    assert "rank 1" in root and "unresponsive" in root and "killed it" in root, done[0][2]
    assert "_fire_if_due" in done[0][2]  # the hung rank's own stack shows where it was stuck


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "env,sets,expect",
    [
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29400"},
            ["--set", "params.bogus=1"],
            "error: --set params.bogus=1: unknown key; allowed:",
        ),
        ({"WORLD_SIZE": "2", "MASTER_PORT": "29400"}, [], "RANK is not set"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, [], "MASTER_PORT is not set"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "x"}, [], "must be integers"),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29400"},
            ["--set", "hosts=2"],
            "key 'hosts': emulated hosts are built by `run --hosts`",
        ),
    ],
)
def test_bad_input_is_one_line_and_status_2(ranks, runs_dir, env, sets, expect):
    ranks.start([*PLAYGROUND, "node", "ring", "--out", str(runs_dir), *sets], clean_env(**env))
    [(code, out, err)] = ranks.finish()
    assert code == 2 and expect in err and len(err.strip().splitlines()) == 1, err
    assert not runs_dir.exists()  # nothing is created before the input is valid


def test_coordinator_port_rule():
    assert coordinator_port({}, 29500) == 29500
    assert coordinator_port({"TORCHELASTIC_RUN_ID": "abc"}, 29500) == 29501  # torchrun's store owns 29500
    assert coordinator_port({"TORCHELASTIC_RUN_ID": "abc", "PLAYGROUND_COORD_PORT": "40000"}, 29500) == 40000
    # torchrun --standalone picks an odd ephemeral MASTER_PORT; + 1 is an even one, which Linux hands
    # to outgoing connections (those to torchrun's store too): moved below the range, same offset
    assert coordinator_port({"TORCHELASTIC_RUN_ID": "abc"}, 36135) == 36136 - 28232 == 7904
    assert coordinator_port({"TORCHELASTIC_RUN_ID": "abc"}, 60998) == 32767
    assert coordinator_port({"TORCHELASTIC_RUN_ID": "abc"}, 32767) == 32768 - 28232
    assert coordinator_port({"TORCHELASTIC_RUN_ID": "abc"}, 61000) == 61001  # above the range: kept
    assert coordinator_port({}, 36135) == 36135  # without torchrun MASTER_PORT is ours, wherever it is
    with pytest.raises(ScenarioError, match="PLAYGROUND_COORD_PORT"):
        coordinator_port({"PLAYGROUND_COORD_PORT": "http"}, 29500)
    assert run_dir_for(Path("runs"), "ring", 29500, {}) == Path("runs/ring-29500")
    assert run_dir_for(Path("runs"), "ring", 29500, {"PLAYGROUND_RUN_DIR": "/x/y"}) == Path("/x/y")


@pytest.mark.timeout(60)
def test_ranks_given_different_overrides_fail_with_one_error_on_every_rank(ranks, runs_dir):
    port = free_tcp_port()
    for r, iters in enumerate(["3", "3", "4"]):
        env = clean_env(RANK=str(r), WORLD_SIZE="3", MASTER_PORT=str(port))
        sets = ["--set", "params.sizes=[1KiB]", "--set", f"params.iters={iters}"]
        ranks.start([*PLAYGROUND, "node", "ring", "--out", str(runs_dir), *sets], env)
    done = ranks.finish()
    assert [code for code, _, _ in done] == [1, 1, 1], done
    said = "rank 2 runs another scenario than rank 0: params.iters: rank 0 has 3, rank 2 has 4"
    root = next(line for line in done[0][2].splitlines() if "root cause" in line)
    assert "ScenarioMismatch" in root and said in root, done[0][2]
    assert "then" not in done[0][2]  # one error: the ranks repeating it are not listed again
    for _, _, err in done[1:]:
        assert "ScenarioMismatch" in err and said in err, err
    result = json.loads((runs_dir / f"ring-{port}" / "result.json").read_text())
    assert result["ok"] is False and len(result["failures"]) == 1 and said in result["failures"][0]


@pytest.mark.timeout(60)
def test_coordinator_port_in_use_is_one_line_and_status_2(ranks, runs_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ranks.start(
            [*PLAYGROUND, "node", "ring", "--out", str(runs_dir), *SMALL],
            clean_env(RANK="0", WORLD_SIZE="2", MASTER_PORT=str(port)),
        )
        [(code, out, err)] = ranks.finish()
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"cannot listen for the coordinator on tcp://127.0.0.1:{port}: Address already in use" in err
    assert "choose another MASTER_PORT" in err and "Traceback" not in err
