"""playground.models.calibration: gamma measured, calibration.json written by `run pingpong`, found
again by the collective runs (newest of the transport, a preset, a file, a default), and bad
specs refused with one line and exit status 2."""

import json
import math
import os
from types import SimpleNamespace

import pytest
import yaml

from playground.cli.testing import run_cli, run_scenario
from playground.models.calibration import (
    CALIBRATION_FILE,
    DEFAULT_LINKS,
    ModelSource,
    load_model,
    measure_gamma,
    model_from_spec,
    network_of,
    newest_calibration,
    read_calibration,
    write_calibration,
)
from playground.models.costs import PRESETS, Link

FIT = SimpleNamespace(alpha_s=60e-6, beta_bytes_per_s=2e9)
GAMMA = {"gamma_bytes_per_s": 5e9, "dtype": "float32", "points": [{"bytes": 1 << 20, "seconds": 2e-4}]}


def _run_dir(runs, name: str, transport: str = "ipc"):
    d = runs / name
    d.mkdir(parents=True)
    (d / "scenario.yaml").write_text(yaml.safe_dump({"name": "pingpong", "transport": transport, "ranks": 2}))
    return d


def _calibration(runs, name: str, transport: str = "ipc", alpha_s: float = 60e-6, date: str | None = None):
    d = _run_dir(runs, name, transport)
    write_calibration(
        d, SimpleNamespace(alpha_s=alpha_s, beta_bytes_per_s=2e9), GAMMA, [64, 4096], [1e-4, 2e-4]
    )
    if date:
        path = d / CALIBRATION_FILE
        path.write_text(json.dumps({**json.loads(path.read_text()), "date": date}))
    return d / CALIBRATION_FILE


# -- gamma ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_measure_gamma_counts_one_operand_per_second(dtype):
    got = measure_gamma(dtype, sizes_bytes=(1 << 16, 1 << 17), reps=3)
    assert got["dtype"] == dtype and [p["bytes"] for p in got["points"]] == [1 << 16, 1 << 17]
    rates = sorted(p["bytes"] / p["seconds"] for p in got["points"])
    assert got["gamma_bytes_per_s"] == pytest.approx(sum(rates) / 2)  # the median of two
    assert 1e7 < got["gamma_bytes_per_s"] < 1e13


# -- the file ------------------------------------------------------------------------------------


def test_write_then_read_round_trip(tmp_path):
    d = _run_dir(tmp_path, "20260101-000000-pingpong", "tcp")
    line = write_calibration(d, FIT, GAMMA, [64, 4096], [1e-4, 2e-4])
    assert line == f"calibration (float32): alpha 60 us, beta 2 GB/s, gamma 5 GB/s -> {d / CALIBRATION_FILE}"
    record = json.loads((d / CALIBRATION_FILE).read_text())
    for key in ("hostname", "cpu_model", "date", "gamma_points", "pingpong_one_way_s"):
        assert record[key]
    assert (record["transport"], record["ranks"], record["dtype"]) == ("tcp", 2, "float32")
    assert record["pingpong_sizes_bytes"] == [64, 4096]
    source = read_calibration(d / CALIBRATION_FILE)
    assert source == ModelSource(Link(60e-6, 2e9, 5e9), "calibration", str(d / CALIBRATION_FILE), "tcp")
    assert source.caption == (
        f"model: calibration {d / CALIBRATION_FILE} (tcp, alpha 60 us, beta 2 GB/s, gamma 5 GB/s)"
    )


def test_gamma_not_measured_reads_as_free(tmp_path):
    d = _run_dir(tmp_path, "r")
    write_calibration(d, FIT, None, [64, 4096], [1e-4, 2e-4])
    source = read_calibration(d / CALIBRATION_FILE)
    assert source.link.gamma_bytes_per_s == math.inf
    assert source.to_dict()["gamma_bytes_per_s"] is None  # JSON has no inf
    json.dumps(source.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    "text, message",
    [
        ("hello", "not a calibration file (not JSON"),
        ("[1, 2]", "not a calibration file (missing 'alpha_s'"),
        (
            '{"alpha_s": 1e-5, "beta_bytes_per_s": 1e9, "transport": "ipc"}',
            "not a calibration file (missing 'gamma_bytes_per_s'",
        ),
        (
            '{"alpha_s": -1e-5, "beta_bytes_per_s": 1e9, "gamma_bytes_per_s": null, "transport": "ipc"}',
            "alpha_s: must be a finite number >= 0, got -1e-05",
        ),
        (
            '{"alpha_s": "5us", "beta_bytes_per_s": 1e9, "gamma_bytes_per_s": 1e9, "transport": "ipc"}',
            "alpha_s: expected a number, got '5us'",
        ),
        (
            '{"alpha_s": 1e-5, "beta_bytes_per_s": 0, "gamma_bytes_per_s": 1e9, "transport": "ipc"}',
            "beta_bytes_per_s: must be > 0",
        ),
    ],
)
def test_a_bad_file_is_refused_saying_why(tmp_path, text, message):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        read_calibration(path)
    with pytest.raises(ValueError):
        model_from_spec(str(path))


# -- finding the model ---------------------------------------------------------------------------


def test_spec_names_a_preset_a_file_or_a_run_directory(tmp_path):
    assert model_from_spec("ib") == ModelSource(PRESETS["ib"], "preset", "ib")
    assert model_from_spec("ib").caption == "model: preset ib (alpha 5 us, beta 50 GB/s)"
    path = _calibration(tmp_path, "run1")
    assert model_from_spec(str(path)).name == str(path.resolve())
    assert model_from_spec(str(path.parent)).name == str(path.resolve())  # `--model runs/latest` works
    with pytest.raises(ValueError, match="no such preset or file; allowed: ib, roce, ethernet, nvlink, or a"):
        model_from_spec("nosuch")
    with pytest.raises(ValueError, match="no such preset or file"):
        model_from_spec(str(tmp_path))  # a directory without a calibration


def test_newest_calibration_of_the_transport(tmp_path):
    _calibration(tmp_path, "a", "ipc", alpha_s=1e-6, date="2026-01-01T10:00:00+0000")
    newest = _calibration(tmp_path, "b", "ipc", alpha_s=2e-6, date="2026-01-02T10:00:00+0000")
    _calibration(tmp_path, "c", "tcp", alpha_s=3e-6, date="2026-01-03T10:00:00+0000")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / CALIBRATION_FILE).write_text("{broken")  # an unreadable one is passed over
    os.symlink("c", tmp_path / "latest")
    assert newest_calibration("ipc", tmp_path).name == str(newest)
    assert newest_calibration("tcp", tmp_path).link.alpha_s == 3e-6
    assert newest_calibration("shm", tmp_path) is None
    assert load_model(None, "ipc", tmp_path).name == str(newest)
    assert load_model("roce", "ipc", tmp_path).kind == "preset"  # a spec wins over what is found


def test_without_a_calibration_a_labelled_default(tmp_path):
    source = load_model(None, "shm", tmp_path / "nothing-here")
    assert (source.kind, source.link) == ("default", DEFAULT_LINKS["shm"])
    assert source.caption.startswith("model: default for shm, not a calibration (alpha 35 us")
    assert "`python -m playground run pingpong --transport shm` measures one" in source.caption


def test_a_calibration_across_emulated_hosts_is_the_model_of_runs_on_that_link_only(tmp_path):
    """`run pingpong --hosts 2 --link 100mbit` must not become a one-host ipc run's model, nor an
    ipc calibration the model of a run across shaped links."""
    ipc = _calibration(tmp_path, "a", "ipc", alpha_s=1e-6, date="2026-01-01T10:00:00+0000")
    d = tmp_path / "b"
    d.mkdir()
    scenario = {"transport": "ipc", "ranks": 2, "hosts": 2, "link": {"rate": "100mbit", "delay": "200us"}}
    (d / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    write_calibration(
        d, SimpleNamespace(alpha_s=300e-6, beta_bytes_per_s=12e6), GAMMA, [64, 4096], [1e-4, 2e-4]
    )
    assert network_of(scenario) == "hosts 100mbit,delay=200us"
    assert json.loads((d / CALIBRATION_FILE).read_text())["network"] == "hosts 100mbit,delay=200us"
    assert load_model(None, "ipc", tmp_path).name == str(ipc)  # the newer shaped one is not ipc's
    assert load_model(None, "hosts 100mbit,delay=200us", tmp_path).link.alpha_s == 300e-6
    other = load_model(None, "hosts 1gbit", tmp_path)  # no calibration of that link: tcp's default, capped
    assert other.kind == "default" and other.link == Link(DEFAULT_LINKS["tcp"].alpha_s, 1e9 / 8, 5e9)
    assert "`python -m playground run pingpong --hosts 2 --link 1gbit` measures one" in other.caption
    delayed = load_model(None, "hosts unshaped,delay=1ms", tmp_path).link
    assert delayed.alpha_s == pytest.approx(DEFAULT_LINKS["tcp"].alpha_s + 1e-3)
    assert delayed.beta_bytes_per_s == DEFAULT_LINKS["tcp"].beta_bytes_per_s


# -- end to end: calibrate, then the model columns ------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["ipc", "tcp", "shm"])
def test_pingpong_writes_the_calibration_the_next_ring_uses(tmp_path, transport):
    code, result, out, err = run_scenario(
        "pingpong",
        tmp_path,
        ranks=2,
        transport=transport,
        # 10 round trips a size: with 3, a busy machine's median can make 64 KiB slower than 1 MiB,
        # and a fit whose time does not grow with size writes no calibration
        sets=["params.sizes=[64,64KiB,1MiB]", "params.iters=10", "params.warmup=1", "params.dtype=float64"],
    )
    assert code == 0, out + err
    path = (tmp_path / "latest" / CALIBRATION_FILE).resolve()
    record = json.loads(path.read_text())
    assert (record["transport"], record["dtype"], record["ranks"]) == (transport, "float64", 2)
    assert record["gamma_bytes_per_s"] > 0 and record["beta_bytes_per_s"] > 0 and record["alpha_s"] >= 0
    assert "calibration (float64): alpha" in out

    code, result, out, err = run_scenario(  # the README's `--set params.model=runs/latest`
        "tree",
        tmp_path,
        ranks=2,
        transport=transport,
        sets=[f"params.model={tmp_path / 'latest'}", "params.sizes=[8]"],
    )
    assert code == 0, out + err
    assert result["model"]["name"] == str(path) and result["model"]["transport"] == transport
    assert yaml.safe_load((tmp_path / "latest" / "scenario.yaml").read_text())["params"]["model"] == str(path)

    code, result, out, err = run_scenario(
        "ring", tmp_path, ranks=2, transport=transport, sets=["params.sizes=[8,1KiB]", "params.iters=1"]
    )
    assert code == 0, out + err
    calibration = str(path)
    assert result["model"]["kind"] == "calibration"
    assert os.path.realpath(result["model"]["name"]) == calibration
    assert result["tables"][0]["title"].split("\n")[1] == result["model"]["caption"]
    assert result["model"]["caption"].startswith("model: calibration ")
    link = read_calibration(path).link
    assert [row["size"] for row in result["rows"]] == [8, 1024]
    for row in result["rows"]:
        assert row["model_pick"] in ("ring", "tree", "hd", "rd")
        assert row["model_us"] == pytest.approx(
            1e6 * (2 * link.message_time_s(row["size"] / 2) + link.reduce_time_s(row["size"] / 2))
        )
        assert row["vs_model"] == pytest.approx(row["time_us"] / row["model_us"])


@pytest.mark.timeout(120)
def test_run_tree_with_a_preset_and_without_any_calibration(tmp_path):
    code, result, out, err = run_scenario(
        "tree", tmp_path, ranks=3, sets=["params.sizes=[8,4KiB]", "params.iters=1", "params.model=ib"]
    )
    assert code == 0, out + err
    assert "model: preset ib (alpha 5 us, beta 50 GB/s)" in out
    ib = PRESETS["ib"]
    assert [row["size"] for row in result["rows"]] == [8, 4096]
    for row in result["rows"]:  # 3 ranks: 2 levels up, 2 down
        assert row["model_us"] == pytest.approx(1e6 * 4 * ib.message_time_s(row["size"]))
    code, result, out, err = run_scenario(
        "tree", tmp_path, ranks=2, sets=["params.sizes=[8]", "params.iters=1"]
    )
    assert code == 0, out + err
    assert result["model"]["kind"] == "default" and "model: default for ipc" in out


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "content, says",
    [
        (None, "no such preset or file; allowed: ib, roce, ethernet, nvlink"),
        ("not json", "not a calibration file (not JSON"),
        ('{"a": 1}', "not a calibration file (missing 'alpha_s'"),
        (
            '{"alpha_s": -5e-6, "beta_bytes_per_s": 1e9, "gamma_bytes_per_s": null, "transport": "ipc"}',
            "alpha_s: must be a finite number >= 0, got -5e-06",
        ),
    ],
)
def test_bad_model_specs_are_one_line_and_exit_2(tmp_path, content, says):
    spec = "nosuch"
    if content is not None:
        spec = str(tmp_path / "calib.json")
        (tmp_path / "calib.json").write_text(content)
    for args, prefix in (
        (["bench", "allreduce", "--model", spec], f"error: --model {spec}: "),
        (["run", "ring", "--set", f"params.model={spec}"], f"error: --set params.model={spec}: "),
    ):
        proc = run_cli([*args, "--out", str(tmp_path / "runs")], timeout_s=50)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
        assert prefix in proc.stderr and says in proc.stderr
        assert not (tmp_path / "runs").exists()  # refused before any run started


def test_gamma_sizes_are_bounded_by_memory_and_time_not_by_what_sysfs_claims(monkeypatch):
    """A VM can report a last-level cache of 480 MiB: 1, 2, 4 times it would be 5.6 GiB of operands."""
    from playground.models import calibration

    def caches(size):
        return lambda: [SimpleNamespace(size_bytes=size)]

    monkeypatch.setattr(calibration, "data_caches", caches(480 << 20))
    big = calibration.gamma_sizes_bytes(available_bytes=64 << 30)
    assert big == (32 << 20, 64 << 20, 128 << 20) and big[-1] == calibration.GAMMA_MAX_OPERAND_BYTES
    small = calibration.gamma_sizes_bytes(available_bytes=768 << 20)  # 3 x 16 MiB = 1/16 of it
    assert small == (4 << 20, 8 << 20, 16 << 20)
    monkeypatch.setattr(calibration, "data_caches", caches(8 << 20))  # a real cache: 1, 2, 4 times it
    assert calibration.gamma_sizes_bytes(available_bytes=64 << 30) == (8 << 20, 16 << 20, 32 << 20)
    assert len(calibration.gamma_sizes_bytes()) == 3  # psutil's available memory by default
