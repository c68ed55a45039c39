"""The calibration: `calibrate` writes one file, models/hostfit.py derives the costs from it, every
model column and the simulator read it; a file from another machine or version is refused with one
line and exit status 2."""

import json
import math
import re

import pytest
from calibrations import COPY_GBPS, SIZES, copies_s, line_s, record, write

import playground as pg
from playground.cli.testing import run_cli
from playground.commands.calibrate import mean_rates, median_patterns
from playground.core.errors import ScenarioError
from playground.models import hostfit
from playground.models.calibration import (
    DEFAULT_LINKS,
    ENVIRONMENT,
    CalibrationMismatch,
    find_calibration,
    load_model,
    model_from_spec,
    read_calibration,
)
from playground.models.costs import PRESETS
from playground.sim.driver import simulate
from playground.sim.network import Machine

# -- the file ---------------------------------------------------------------------------------------


def test_a_calibration_of_this_machine_is_read(tmp_path):
    calibration = read_calibration(write(tmp_path / "c.json"))
    assert calibration.transports == ("ipc", "shm") and calibration.has("shm") and not calibration.has("tcp")
    assert calibration.segment_bytes("ipc") == 4 << 20
    with pytest.raises(ValueError, match="has no tcp; it calibrated ipc, shm"):
        calibration.host("tcp", 2, 1024)


@pytest.mark.parametrize(
    "change, says",
    [
        ({"machine": {"hostname": "elsewhere"}}, "measured on another machine (host 'elsewhere', this one"),
        ({"machine": {"cpu_model": "a 6502"}}, "measured on another machine (CPU 'a 6502', this one"),
        ({"machine": {"cores": 1000}}, "measured on another machine (cores 1000, this one"),
        ({"version": "0.0.1"}, "written by another version (format 1, playground 0.0.1; this is format 1"),
        ({"format": 0}, "written by another version (format 0"),
    ],
)
def test_a_file_from_another_machine_or_version_is_refused_saying_why(tmp_path, change, says):
    rec = record()
    for key, value in change.items():
        rec[key] = {**rec[key], **value} if isinstance(value, dict) else value
    path = tmp_path / "c.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(CalibrationMismatch, match="^" + str(path).replace(".", r"\.") + ": ") as e:
        read_calibration(path)
    assert says in str(e.value) and "`python -m playground calibrate`" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "text, says",
    [
        ("hello", "not a calibration file (not JSON"),
        ('{"format": 1}', "not a calibration file (missing 'version'"),
    ],
)
def test_a_file_that_is_not_a_calibration_is_refused(tmp_path, text, says):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=re.escape(says)):
        read_calibration(path)


@pytest.mark.timeout(60)
def test_every_command_refuses_another_machines_file_in_one_line_exit_2(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**record(), "machine": {**record()["machine"], "hostname": "elsewhere"}}))
    for args in (
        ["bench", "allreduce", "--ranks", "2", "--link", str(path)],
        ["run", "ring", "--set", f"params.link={path}"],
        ["simulate", "allreduce", "--link", str(path)],
    ):
        proc = run_cli([*args, "--out", str(tmp_path / "runs")], timeout_s=50)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
        assert "measured on another machine (host 'elsewhere'" in proc.stderr
        assert not (tmp_path / "runs").exists()  # refused before any run started


# -- which model a table uses -----------------------------------------------------------------------


def test_the_default_calibration_is_found_and_a_preset_or_file_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    assert find_calibration() is None
    source = load_model(None, "shm")
    assert (source.kind, source.link) == ("default", DEFAULT_LINKS["shm"])
    assert "`python -m playground calibrate` measures this machine" in source.caption
    write(tmp_path / "calibration.json")  # the current directory's
    source = load_model(None, "shm")
    assert source.kind == "calibration" and source.transport == "shm" and source.calibration.cores >= 1
    assert source.caption.startswith("model: calibration calibration.json (shm, alpha ")
    assert load_model(None, "tcp").kind == "default"  # it calibrated no tcp
    assert load_model("roce", "shm").link == PRESETS["roce"]
    other = write(tmp_path / "other.json", transports=("ipc",))
    monkeypatch.setenv(ENVIRONMENT, str(other))  # PLAYGROUND_CALIBRATION names another
    assert load_model(None, "ipc").name == str(other) and load_model(None, "shm").kind == "default"
    assert model_from_spec(str(tmp_path / "calibration.json"), "shm").kind == "calibration"
    with pytest.raises(ScenarioError, match="no such preset or file; allowed: ib, roce, ethernet, nvlink"):
        model_from_spec("nosuch")


# -- what is derived ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["ipc", "shm"])
def test_the_derived_host_replays_the_ping_pong_it_was_calibrated_on(tmp_path, transport):
    """At 2 ranks the piecewise fit recovers the made-up lines exactly: a message alone (its CPU, its
    latency, its two copies at the ping-pong's footprint) takes the measured one-way time."""
    rec = record()
    rates = hostfit.Rates(rec["host"]["rates"])
    costs = hostfit.message_costs(rec["transports"][transport]["patterns"], rates, [0, 65536], 2, 2)
    for n in SIZES:
        c = next(c for c in reversed(costs) if c.from_bytes <= n)
        alone = c.one_way_s(n) + 2 * n / rates.copy_bytes_per_s(hostfit.pingpong_footprint(n))
        assert alone == pytest.approx(line_s(transport, n) + copies_s(n), rel=1e-9)
        assert c.latency_s == pytest.approx(c.send_s + c.recv_s, rel=1e-9)  # CPU half of the line
    loaded = hostfit.message_costs(rec["transports"][transport]["patterns"], rates, [0, 65536], 4, 2)
    assert loaded[0].latency_s == 0 and loaded[0].send_s + loaded[0].recv_s == pytest.approx(
        30e-6 + line_s(transport, 0), rel=1e-9
    )


def test_where_waiting_ranks_poll_a_message_costs_at_most_what_the_cores_had_per_message():
    """Polling ranks never leave a core idle, so the CPU they measured per message is at least the
    cores' time over the messages in flight: beyond that it was polling, not work."""
    rec = record()
    rates = hostfit.Rates(rec["host"]["rates"])
    patterns = rec["transports"]["shm"]["patterns"]
    one_way = {p["size"]: p["time_s"] for p in patterns if p["pattern"] == "pingpong" and p["ranks"] == 4}
    # the made-up CPU (30 us + the line + the copies) exceeds 2 cores x one way / 2 messages in flight
    assert hostfit.cores_per_message(one_way[64], 4, 2) == pytest.approx(one_way[64])
    sleeping = hostfit.message_costs(patterns, rates, [0, 65536], 4, 2)
    polling = hostfit.message_costs(patterns, rates, [0, 65536], 4, 2, polling_cores=2)
    assert sleeping[0].send_s + sleeping[0].recv_s == pytest.approx(30e-6 + line_s("shm", 0), rel=1e-9)
    assert polling[0].send_s + polling[0].recv_s == pytest.approx(line_s("shm", 0), rel=1e-9)
    assert polling[0].latency_s == 0  # the waiting for cores is the simulator's


def test_where_ranks_sleep_only_a_receiver_that_waited_pays_the_wake_up():
    """The exchange (both partners send, then receive) finds its messages there: its CPU per message
    is every message's; the ping-pong's beyond it (10 us here) is the woken receiver's."""
    rec = record()
    rates = hostfit.Rates(rec["host"]["rates"])
    patterns = [
        {**p, "cpu_s": p["cpu_s"] - 10e-6} if p["pattern"] == "pingping" else p
        for p in rec["transports"]["ipc"]["patterns"]
    ]
    sleeping = hostfit.message_costs(patterns, rates, [0, 65536], 4, 2)
    for costs in sleeping:
        assert costs.wait_s == pytest.approx(10e-6, rel=1e-9)
    assert sleeping[0].send_s + sleeping[0].recv_s + sleeping[0].wait_s == pytest.approx(
        30e-6 + line_s("ipc", 0), rel=1e-9
    )
    # with a core per rank, and where ranks poll, nobody is woken: no such cost
    assert all(c.wait_s == 0 for c in hostfit.message_costs(patterns, rates, [0, 65536], 2, 2))
    assert all(
        c.wait_s == 0 for c in hostfit.message_costs(patterns, rates, [0, 65536], 4, 2, polling_cores=2)
    )


def test_a_message_costs_the_windows_cpu_a_switch_the_exchanges_beyond_and_a_wait_the_ping_pongs():
    """Over shared memory the window (eight sends, then eight receives) finds its messages there: its
    CPU per message is a message's; the exchange's beyond it is a context switch (each of its messages
    has its receiver run once for it: the scheduler charges it where a core changes ranks); the
    ping-pong's beyond that is the wait of a receiver that slept for its message."""
    rec = record()
    rates = hostfit.Rates(rec["host"]["rates"])
    plain = rec["transports"]["shm"]["patterns"]
    patterns = [
        {**p, "cpu_s": p["cpu_s"] - (10e-6 if p["pattern"] == "pingping" else 0.0)} for p in plain
    ] + [{**p, "pattern": "window", "cpu_s": p["cpu_s"] - 20e-6} for p in plain if p["pattern"] == "pingpong"]
    costs = hostfit.message_costs(patterns, rates, [0, 65536], 4, 2)
    switch = hostfit.switch_s(patterns, rates, [0, 65536], 4, 2, 0)
    assert switch == pytest.approx(10e-6, rel=1e-9)
    assert costs[0].send_s + costs[0].recv_s == pytest.approx(10e-6 + line_s("shm", 0), rel=1e-9)
    for c in costs:
        assert c.wait_s == pytest.approx(10e-6, rel=1e-9)
    # over ZeroMQ the I/O threads batch the window's messages to one peer: the exchange's CPU stands
    zmq = hostfit.message_costs(patterns, rates, [0, 65536], 4, 2, windows=False)
    assert zmq[0].send_s + zmq[0].recv_s == pytest.approx(20e-6 + line_s("shm", 0), rel=1e-9)
    assert hostfit.window_applies("shm") and not hostfit.window_applies("ipc")
    # with a core per rank nobody waits for a core: the idle ping-pong's costs, window or not
    assert hostfit.message_costs(patterns, rates, [0, 65536], 2, 2) == hostfit.message_costs(
        plain, rates, [0, 65536], 2, 2
    )
    assert hostfit.switch_s(patterns, rates, [0, 65536], 2, 2, 0) == 0.0
    # polled: every figure at most the cores' time per message, the window's too
    polled = hostfit.message_costs(patterns, rates, [0, 65536], 4, 2, polling_cores=2)
    one_way = next(
        p["time_s"] for p in plain if p["pattern"] == "pingpong" and p["ranks"] == 4 and p["size"] == 64
    )
    assert polled[0].send_s + polled[0].recv_s <= hostfit.cores_per_message(one_way, 4, 2)


def test_numpy_calls_among_other_ranks_cost_the_probes_ratio():
    probe = [
        {"pattern": "numpy", "size": 64, "ranks": 2, "time_s": 3e-6, "hot_s": 2e-6},
        {"pattern": "numpy", "size": 64, "ranks": 8, "time_s": 5e-6, "hot_s": 2e-6},
        {
            "pattern": "numpy",
            "size": 64,
            "ranks": 4,
            "time_s": 1e-6,
            "hot_s": 2e-6,
        },  # faster: a hiccup in the loop
    ]
    assert hostfit.numpy_scale(probe, 8) == pytest.approx(2.5) and hostfit.numpy_scale(
        probe, 2
    ) == pytest.approx(1.5)
    assert hostfit.numpy_scale(probe, 4) == 1.0  # never cheaper than in a loop
    assert hostfit.numpy_scale(probe, 16) == 1.0  # a calibration without the probe: as timed
    rec = record(cores=2)
    rec["transports"]["shm"]["patterns"] += [
        {**p, "cpu_s": p["time_s"], "main_cpu_s": p["time_s"]} for p in probe
    ]
    assert hostfit.host_model(rec, "shm", 8, 1024).numpy_scale == pytest.approx(2.5)
    assert hostfit.host_model(rec, "shm", 2, 1024).numpy_scale == pytest.approx(1.5)


def test_a_message_beside_compute_costs_the_behind_compute_ping_pings_ratio(tmp_path):
    rec = record(transports=("ipc",))
    # the exchange's mean one-way time, plain and while every rank's other thread computes:
    # 2x and 4x at 2 ranks (64 B, 64 KiB), 3x and 5x at 4 ranks
    for ranks, ratios in ((2, (2.0, 4.0)), (4, (3.0, 5.0))):
        for size, ratio in zip((64, 65536), ratios, strict=True):
            for pattern, mean in (("pingping", 10e-6), ("behind_compute", 10e-6 * ratio)):
                rec["transports"]["ipc"]["patterns"].append(
                    {"pattern": pattern, "size": size, "ranks": ranks, "reps": 200, "time_s": 10e-6,
                     "mean_s": mean, "cpu_s": 1e-6, "main_cpu_s": 1e-6}
                )  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(rec))
    calibration = read_calibration(tmp_path / "c.json")
    assert calibration.behind_compute("ipc", 2, 64) == pytest.approx(2.0)
    assert calibration.behind_compute("ipc", 2, 65536) == pytest.approx(4.0)
    assert calibration.behind_compute("ipc", 2, 2048) == pytest.approx(3.0)  # halfway on a log scale
    assert calibration.behind_compute("ipc", 2, 1 << 24) == pytest.approx(4.0)  # beyond: the end's
    assert calibration.behind_compute("ipc", 3, 64) == pytest.approx(3.0)  # the next count measured
    assert calibration.behind_compute("ipc", 64, 65536) == pytest.approx(5.0)  # or the largest
    for p in rec["transports"]["ipc"]["patterns"]:
        if p["pattern"] == "behind_compute":
            p["mean_s"] = 5e-6  # faster beside compute than idle: noise, priced as idle
    (tmp_path / "c.json").write_text(json.dumps(rec))
    assert read_calibration(tmp_path / "c.json").behind_compute("ipc", 2, 64) == 1.0
    assert read_calibration(write(tmp_path / "old.json")).behind_compute("ipc", 2, 64) == 1.0  # none
    for p in rec["transports"]["ipc"]["patterns"]:
        if p["pattern"] == "behind_compute":
            p["mean_s"] = 40e-6
        if p["ranks"] == 2:
            p["sleeps"] = False  # receivers that spin: their probe fights its own compute thread
    (tmp_path / "c.json").write_text(json.dumps(rec))
    spinning = read_calibration(tmp_path / "c.json")
    assert spinning.behind_compute("ipc", 2, 64) == 1.0 and spinning.behind_compute("ipc", 4, 64) == 4.0


def test_the_compute_beside_the_messages_runs_from_with_to_its_end():
    from playground.comm.patterns import Computing

    with Computing() as computing:
        assert computing.thread.is_alive()
    assert not computing.thread.is_alive()


def test_a_working_copy_moves_one_ranks_buffers_and_a_message_all_ranks():
    """A 4 MiB all-reduce on 8 ranks on 2 cores touches 96 MiB (inputs, outputs and the rings its
    messages wait in), nearer memory's rate (half the cache's at 64 MiB here), but a rank's working
    copy of its input, made as the call starts, its own 12 MiB; with a core per rank, messages are
    taken as they land and the rings do not count: 2 x 4 MiB a rank."""
    rec = record(cores=2)
    rec["host"]["rates"][-1]["copy_one_gbps"] = COPY_GBPS / 2  # at 64 MiB: memory's rate
    rates = hostfit.Rates(rec["host"]["rates"])
    host = hostfit.host_model(rec, "shm", 8, 4 << 20)
    assert host.copy_s_per_byte == pytest.approx(1 / rates.copy_bytes_per_s(12 << 20))
    assert host.message_copy_s_per_byte == pytest.approx(1 / rates.copy_bytes_per_s(96 << 20))
    assert host.copy_s_per_byte < host.message_copy_s_per_byte
    idle = hostfit.host_model(rec, "shm", 2, 4 << 20)
    assert idle.message_copy_s_per_byte == pytest.approx(1 / rates.copy_bytes_per_s(16 << 20))


def test_where_ranks_outnumber_cores_the_host_shares_them_and_wakes_sleepers(tmp_path):
    calibration = read_calibration(write(tmp_path / "c.json"))
    cores = calibration.cores
    idle, crowded = calibration.host("shm", 2, 1 << 20), calibration.host("shm", 4 * cores, 1 << 20)
    assert idle.cores == crowded.cores == cores and idle.slice_s == 4e-3
    assert crowded.migration_cost_s == 0.5e-3  # a record without one: the kernel's default
    assert idle.wake_s == 0.0 and crowded.wake_s == 25e-6  # shm ranks sleep beyond 2 per core
    assert calibration.host("ipc", 2 * cores, 4096).wake_s == 25e-6  # ZeroMQ's wait always sleeps
    assert idle.gamma_bytes_per_s == pytest.approx(5e9) and idle.copy_s_per_byte == pytest.approx(1e-10)
    # the closed forms' link: the idle one-way time by range, gamma at the footprint
    link = calibration.link("ipc")
    assert link.message_time_s(4096) == pytest.approx(line_s("ipc", 4096) + copies_s(4096), rel=1e-9)
    assert link.gamma_bytes_per_s == pytest.approx(5e9) and len(link.pieces) == 2
    # 8 ranks on fewer cores take longer than the same ranks each with a core of their own
    host = calibration.host("ipc", 8, 1 << 20)
    times = {}
    for cores_now in (cores, 8):
        machine = Machine(1, 8, link, link, host.gamma_bytes_per_s, cores_now, host)
        row, _ = simulate(machine, "allreduce", "ring", 1 << 20, data=False, segment_bytes=4 << 20)
        times[cores_now] = row["time_us"]
    assert cores >= 8 or times[cores] > 1.5 * times[8]
    assert math.isfinite(times[8]) and times[8] > 0


# -- the command ------------------------------------------------------------------------------------


def test_the_rates_are_the_rounds_harmonic_mean_at_each_size():
    """At a cache's edge one round copies at memory's rate, another at the cache's: the mean time per
    byte is what a collective meeting both pays."""
    rounds = [
        [
            {"bytes": 16 << 20, "copy_one_gbps": 15.0, "add_one_gbps": 9.0},
            {"bytes": 32 << 20, "copy_one_gbps": 7.0, "add_one_gbps": 5.0},
        ],
        [
            {"bytes": 16 << 20, "copy_one_gbps": 15.0, "add_one_gbps": 9.0},
            {"bytes": 32 << 20, "copy_one_gbps": 14.0, "add_one_gbps": 5.0},
        ],
    ]
    got = mean_rates(rounds)
    assert [r["bytes"] for r in got] == [16 << 20, 32 << 20]
    assert got[0]["copy_one_gbps"] == pytest.approx(15.0) and got[1]["add_one_gbps"] == pytest.approx(5.0)
    assert got[1]["copy_one_gbps"] == pytest.approx(2 / (1 / 7 + 1 / 14))  # 9.33 GB/s


def test_each_figure_is_the_median_of_the_rounds_launches():
    """A draw of the placement (the 24 us round: a pair that shared a core) does not set the figure."""

    def row(pattern, size, t):
        return {
            "pattern": pattern,
            "size": size,
            "ranks": 4,
            "reps": 50,
            "time_s": t,
            "cpu_s": 2 * t,
            "main_cpu_s": t,
        }

    rounds = [
        [row("pingpong", 64, 95e-6), row("pingping", 64, 80e-6)],
        [row("pingpong", 64, 24e-6), row("pingping", 64, 70e-6)],
        [row("pingping", 64, 90e-6), row("pingpong", 64, 91e-6)],
    ]
    got = {p["pattern"]: p for p in median_patterns(rounds)}
    assert got["pingpong"]["time_s"] == 91e-6 and got["pingpong"]["cpu_s"] == 182e-6
    assert got["pingping"]["time_s"] == 80e-6 and got["pingping"]["main_cpu_s"] == 80e-6
    assert got["pingpong"]["rounds"] == 3 and got["pingpong"]["ranks"] == 4 and got["pingpong"]["size"] == 64
    # a round faster than a core per rank (48 us one way) shared cores: left out, the median of the rest
    idle = [[row("pingpong", 64, 48e-6), row("pingping", 64, 60e-6)]]
    got = {p["pattern"]: p for p in median_patterns(rounds, idle)}
    assert got["pingpong"]["time_s"] == pytest.approx(93e-6) and got["pingpong"]["rounds"] == 3
    assert got["pingping"]["time_s"] == 80e-6
    fast = [[row("pingpong", 64, 24e-6)], [row("pingpong", 64, 30e-6)]]  # every round: the median of all
    assert median_patterns(fast, idle)[0]["time_s"] == pytest.approx(27e-6)


def _calibrate_rows(comm, params):
    from nodes.calibrate import Params, main

    return [(row["pattern"], row["size"]) for row in main(comm, Params(**params))["rows"]]


@pytest.mark.timeout(60)
def test_the_idle_patterns_are_measured_before_any_compute_thread_runs(tmp_path):
    # numpy's BLAS threads spin on for a while after the compute thread's matrix products: what is
    # measured after them shares the cores, so every idle pattern and the numpy probe come first
    result = pg.launch(
        _calibrate_rows, 2, {"sizes": (64, 4096), "budget_s": 0.01}, transport="shm", out=tmp_path
    )
    idle = [(pattern, size) for size in (64, 4096) for pattern in ("pingpong", "pingping", "window")]
    computing = [("behind_compute", 64), ("behind_compute", 4096)]
    assert result.ok and len(result.returned) == 2
    for rank in result.returned:
        assert [tuple(r) for r in rank["value"]] == [*idle, ("numpy", 64), *computing]


@pytest.mark.timeout(120)
def test_calibrate_end_to_end_at_tiny_sizes(tmp_path):
    out = tmp_path / "cal.json"
    proc = run_cli(
        [
            "calibrate",
            "--transports",
            "shm",
            "--sizes",
            "64,4KiB",
            "--copy-sizes",
            "64KiB,256KiB",
            "--ranks",
            "2,4",
            "--budget",
            "0.02",
            "--iters",
            "2",
            "--rounds",
            "2",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "runs"),
        ],  # fmt: skip
        timeout_s=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"calibration: {out}" in proc.stdout
    assert "beside compute" in proc.stdout  # the summary's column: the ping-ping beside compute
    launches = [
        line.split("]")[0] + "] " + line.split("] ")[1]
        for line in proc.stdout.splitlines()
        if "ping-pongs" in line
    ]
    assert launches == [  # the second round in the other order
        "[1/4] shm: every pair of 2 ranks ping-pongs",
        "[2/4] shm: every pair of 4 ranks ping-pongs",
        "[3/4] shm: every pair of 4 ranks ping-pongs",
        "[4/4] shm: every pair of 2 ranks ping-pongs",
    ]
    rec = json.loads(out.read_text())
    patterns = rec["transports"]["shm"]["patterns"]
    assert {(p["pattern"], p["ranks"], p["size"]) for p in patterns} == {
        (pattern, ranks, size)
        for pattern in ("pingpong", "pingping", "window", "behind_compute")  # the last: with compute
        for ranks in (2, 4)
        for size in (64, 4096)
    } | {("numpy", ranks, 64) for ranks in (2, 4)}  # the numpy probe: one small call after each message
    assert all(p["time_s"] > 0 and p["cpu_s"] > 0 and p["reps"] >= 3 and p["rounds"] == 2 for p in patterns)
    assert all(p["mean_s"] >= p["time_s"] * 0.5 for p in patterns if p["pattern"] != "numpy")
    assert all(p["hot_s"] > 0 for p in patterns if p["pattern"] == "numpy")
    assert (
        0 < rec["host"]["timed_python_s"] < 1e-3
    )  # the communicator's Python a simulation times per message
    assert [r["bytes"] for r in rec["host"]["rates"]] == [64 << 10, 256 << 10]
    assert rec["host"]["slice_s"] >= 0 and rec["host"]["wake_s"] >= 0 and rec["host"]["migration_cost_s"] > 0
    calibration = read_calibration(out)  # this machine's, this version's
    assert calibration.transports == ("shm",)
    proc = run_cli(
        [
            "simulate",
            "allreduce",
            "--link",
            str(out),
            "--transport",
            "shm",
            "--ranks",
            "2,3",
            "--sizes",
            "4KiB",
            "--algo",
            "ring",
            "--out",
            str(tmp_path / "runs"),
        ],  # fmt: skip
        timeout_s=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "runs" / "latest" / "result.json").read_text())["rows"]
    assert [r["ranks"] for r in rows] == [2, 3] and all(r["time_us"] > 0 for r in rows)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "args, says",
    [
        (["--transports", "udp"], "--transports 'udp': allowed: ipc, shm, tcp"),
        (["--sizes", "64"], "--sizes '64': give at least two distinct sizes >= 1 byte"),
        (["--ranks", "3"], "--ranks '3': expected even rank counts from 2 to 64, starting at 2"),
        (["--budget", "0"], "--budget 0.0: expected seconds > 0"),
        (["--rounds", "0"], "--rounds 0: expected at least 1"),
    ],
)
def test_calibrate_bad_flags_are_one_line(tmp_path, args, says):
    proc = run_cli(["calibrate", *args, "--out", str(tmp_path / "c.json")], timeout_s=25)
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {says}", proc.stderr
    assert not (tmp_path / "c.json").exists()
