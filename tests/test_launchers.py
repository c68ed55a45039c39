"""The launchers users already have, run for real: MPICH's mpiexec, srun on a Slurm cluster this
session starts by hand, torchrun; on one host and across two emulated hosts (network namespaces).
Each test runs the command the README shows ("python" being this interpreter) and checks the run:
exit status, the result, one log per rank, and where each rank ran.

A missing tool skips with the reason, or fails when PLAYGROUND_REQUIRE_TOOLS is set (CI installs
MPICH and Slurm). torch is optional everywhere: without it the torchrun test skips.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from clusters import SLURM_TOOLS, HostPair, SlurmCluster, SlurmNode, can_emulate_hosts
from test_external import SMALL, Ranks, assert_good_run, clean_env, ranks  # noqa: F401 - ranks is a fixture
from tools import NO_TORCH, have, importable, need

from playground.cli.testing import PLAYGROUND
from playground.comm.addresses import free_tcp_port
from playground.launcher.external import EPHEMERAL_PORTS
from playground.tracing.trace import read_events


def _mpich_mpiexec() -> str | None:
    exe = shutil.which("mpiexec")
    if exe is None:
        return None
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return exe if "HYDRA" in version or "MPICH" in version else None


MPIEXEC = _mpich_mpiexec()
NO_MPICH = "MPICH's mpiexec (hydra) is not installed (apt-get install mpich); -genv is MPICH syntax"
NO_SLURM = "Slurm is not installed (apt-get install slurmctld slurmd slurm-client munge)"


def node_ring(out: Path) -> list[str]:
    """`python -m playground node ring`, small, writing into `out`."""
    return [*PLAYGROUND, "node", "ring", "--out", str(out), *SMALL]


def rank_clocks(run_dir: Path, n: int) -> list[dict]:
    """Each rank's clock event (offset, uncertainty, its data endpoint)."""
    return [
        next(e["args"] for e in read_events(run_dir / f"rank-{r}.jsonl") if e["name"] == "clock")
        for r in range(n)
    ]


def assert_same_clock(clocks: list[dict]) -> None:
    """Namespaces share one kernel clock: the true offset is 0, so each estimate is within its bound."""
    for r, c in enumerate(clocks):
        assert abs(c["offset_us"]) <= c["uncertainty_us"], (r, c)


# -- one host ------------------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_mpiexec(ranks, runs_dir):  # noqa: F811 - the fixture imported above
    need(MPIEXEC is not None, NO_MPICH)
    port = free_tcp_port()
    ranks.start(
        [
            MPIEXEC,
            "-n",
            "4",
            "-genv",
            "MASTER_ADDR",
            "127.0.0.1",
            "-genv",
            "MASTER_PORT",
            str(port),
            *node_ring(runs_dir),
        ],
        clean_env(),
    )
    [(code, out, err)] = ranks.finish(timeout_s=60)
    assert code == 0, out + err
    assert "4 ranks over tcp" in out and out.count("#wrong") == 1, out  # only rank 0 prints the table
    assert_good_run(runs_dir / f"ring-{port}", runs_dir, 4)
    assert_same_clock(rank_clocks(runs_dir / f"ring-{port}", 4))


@pytest.fixture(scope="session")
def slurm():
    """A one-machine Slurm cluster: munged, slurmctld and one slurmd (node pg1, 4 CPUs declared)."""
    need(have(*SLURM_TOOLS), NO_SLURM)
    need(os.geteuid() == 0, "the Slurm tests start munged, slurmctld and slurmd as root")
    root = Path(tempfile.mkdtemp(prefix="pg-slurm-"))  # short: munge's socket path must fit in 108 bytes
    cluster = SlurmCluster(root, [SlurmNode("pg1", "127.0.0.1")]).start()
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(120)
def test_srun(ranks, runs_dir, slurm):  # noqa: F811
    port = free_tcp_port()
    ranks.start(
        [*slurm.srun_prefix(), "-n", "4", "--kill-on-bad-exit=1", *node_ring(runs_dir)],
        clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), SLURM_CONF=str(slurm.conf)),
    )
    [(code, out, err)] = ranks.finish(timeout_s=90)
    assert code == 0, out + err
    assert "4 ranks over tcp" in out and out.count("#wrong") == 1, out
    assert_good_run(runs_dir / f"ring-{port}", runs_dir, 4)


@pytest.mark.timeout(120)
def test_srun_failing_rank_ends_the_job_with_its_root_cause(ranks, runs_dir, slurm):  # noqa: F811
    port = free_tcp_port()
    t0 = time.monotonic()
    ranks.start(
        [
            *slurm.srun_prefix(),
            "-n",
            "4",
            "--kill-on-bad-exit=1",
            *node_ring(runs_dir),
            "--set",
            "fault.rank=2",
            "--set",
            "fault.action=raise",
        ],
        clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), SLURM_CONF=str(slurm.conf)),
    )
    [(code, out, err)] = ranks.finish(timeout_s=90)
    assert code != 0 and time.monotonic() - t0 < 30, out + err
    root = next(line for line in err.splitlines() if "root cause" in line)
    assert "rank 2" in root and "FaultInjected" in root, err
    assert json.loads((runs_dir / f"ring-{port}" / "result.json").read_text())["ok"] is False


@pytest.mark.timeout(120)
def test_torchrun(ranks, runs_dir):  # noqa: F811
    need(importable("torch"), NO_TORCH)
    ranks.start(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "4",
            "-m",
            "playground",
            "node",
            "ring",
            "--out",
            str(runs_dir),
            *SMALL,
        ],
        clean_env(),
        cwd=runs_dir.parent,
    )
    [(code, out, err)] = ranks.finish(timeout_s=100)
    assert code == 0, out + err
    run_dir = (runs_dir / "latest").resolve()
    assert_good_run(run_dir, runs_dir, 4)
    # ring-<coordinator port>: --standalone's MASTER_PORT is ephemeral (torchrun's store holds it), so
    # the coordinator's MASTER_PORT + 1 moved below the range, where no outgoing connection can hold it
    assert 0 < int(run_dir.name.rsplit("-", 1)[1]) < EPHEMERAL_PORTS.start


# -- two emulated hosts ----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def hosts():
    ok, why = can_emulate_hosts()
    need(ok, why)
    pair = HostPair().create()
    yield pair
    pair.destroy()


def assert_placed(clocks: list[dict], hosts: HostPair) -> None:
    """Ranks 0, 1 on the first host and 2, 3 on the second: their data sockets say so."""
    where = [c["endpoint"].split("//")[1].split(":")[0] for c in clocks]
    assert where == [hosts.addrs[0]] * 2 + [hosts.addrs[1]] * 2, where


def assert_ring_across_hosts(launched: Ranks, runs_dir, port: int, hosts: HostPair) -> None:
    """The launcher's 4 ranks finished a good ring, 2 on each host, their clocks agreeing."""
    [(code, out, err)] = launched.finish(timeout_s=90)
    assert code == 0, out + err
    run_dir = runs_dir / f"ring-{port}"
    assert_good_run(run_dir, runs_dir, 4)
    clocks = rank_clocks(run_dir, 4)
    assert_placed(clocks, hosts)
    assert_same_clock(clocks)


@pytest.mark.timeout(120)
def test_mpiexec_across_emulated_hosts(ranks, runs_dir, hosts):  # noqa: F811
    need(MPIEXEC is not None, NO_MPICH)
    rsh = shutil.which("playground-netns-rsh") or str(Path(sys.executable).parent / "playground-netns-rsh")
    need(Path(rsh).exists(), "playground-netns-rsh is not installed (pip install . puts it beside python)")
    port = free_tcp_port()
    ranks.start(
        [
            "ip",
            "netns",
            "exec",
            hosts.names[0],
            MPIEXEC,
            "-launcher",
            "rsh",
            "-launcher-exec",
            rsh,
            "-hosts",
            ",".join(hosts.addrs),
            "-ppn",
            "2",
            "-n",
            "4",
            "-genv",
            "MASTER_ADDR",
            hosts.addrs[0],
            "-genv",
            "MASTER_PORT",
            str(port),
            *node_ring(runs_dir),
        ],
        clean_env(HYDRA_LAUNCHER_AUTOFORK="0"),
    )
    assert_ring_across_hosts(ranks, runs_dir, port, hosts)


@pytest.fixture(scope="session")
def slurm_hosts(hosts):
    """Slurm across the two emulated hosts: slurmctld and slurmd h1 in the first, slurmd h2 in the
    second, each node with its own host name."""
    need(have(*SLURM_TOOLS), NO_SLURM)
    root = Path(tempfile.mkdtemp(prefix="pg-slurm-"))
    nodes = [SlurmNode(f"h{i + 1}", addr, tuple(hosts.enter(i))) for i, addr in enumerate(hosts.addrs)]
    cluster = SlurmCluster(root, nodes, controller=f"h1({hosts.addrs[0]})").start()
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(120)
def test_srun_across_emulated_hosts(ranks, runs_dir, hosts, slurm_hosts):  # noqa: F811
    port = free_tcp_port()
    ranks.start(
        [
            *slurm_hosts.srun_prefix(),
            "-N",
            "2",
            "-n",
            "4",
            "--ntasks-per-node",
            "2",
            "--kill-on-bad-exit=1",
            *node_ring(runs_dir),
        ],
        clean_env(MASTER_ADDR=hosts.addrs[0], MASTER_PORT=str(port), SLURM_CONF=str(slurm_hosts.conf)),
    )
    assert_ring_across_hosts(ranks, runs_dir, port, hosts)
