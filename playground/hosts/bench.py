"""The emulated link's benchmark: is beta the set rate, and does alpha rise by the set delay?

    python -m playground.hosts.bench [--repeats 5] [--rates 100mbit,1gbit,10gbit] [--delay 200us]

Runs `python -m playground run pingpong --hosts 2 --link ...` (root) once per setting per round,
the settings in a different order each round (alternating, so a noisy spell on this shared machine
does not land on one setting), and prints the median and min-max over the rounds:
- beta per rate: the alpha-beta fit to our one-way times over messages much larger than tbf's
  burst (a message that fits the bucket leaves at veth speed, which is not the set rate);
- alpha with and without the delay, on a 1gbit link, over messages that fit the bucket and go inline
  (64 B to 60 KB, below ZeroMQ's zero-copy path): there the time is alpha + n/(veth speed), a line;
  a fit across the burst would draw one line through two (fast inside the bucket, the set rate past
  it) and its intercept would move with the burst. A run whose times do not grow with size (noise
  larger than the 60 KB's few microseconds) has no fit; the table says how many;
- the one-way time of 8-byte messages between the two hosts, posted with a gap after each other,
  undelayed and delayed (less the delay): what an idle wait of that length costs this machine, and
  whether the delay adds exactly itself to it (`--probe`: only this).
Not a test: timed figures depend on the machine and its load (the README shows this machine's).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zmq

from playground.comm.delay import DelayedTransport
from playground.comm.transport import Transport
from playground.comm.zmq_transport import ZmqTransport
from playground.core.argparser import OneLineParser
from playground.core.errors import LabError, WaitTimeout
from playground.core.sizes import format_duration, format_rate, format_size, parse_duration, parse_rate
from playground.core.topology import host_addr, tbf_burst_bytes
from playground.hosts import netns
from playground.models.alphabeta import fit_alpha_beta

SMALL_SIZES = (64, 4096, 32768, 60000)
ALPHA_RATE = "1gbit"


def beta_sizes(rate_bps: int) -> tuple[int, ...]:
    """Three message sizes past tbf's bucket (the smallest a power of two >= 1.5 x the burst),
    doubling: past the burst, the one-way time grows by exactly size/rate."""
    smallest = 1 << (3 * tbf_burst_bytes(rate_bps) // 2 - 1).bit_length()
    return smallest, 2 * smallest, 4 * smallest


def pingpong(link: str, sizes: tuple[int, ...], iters: int, out: Path) -> tuple[float, float] | None:
    """(alpha s, beta bytes/s) of one `run pingpong --hosts 2 --link LINK`; None without a fit."""
    args = [sys.executable, "-m", "playground", "run", "pingpong", "--hosts", "2", "--link", link]
    args += ["--out", str(out), "--set", f"params.sizes=[{','.join(map(str, sizes))}]"]
    args += ["--set", f"params.iters={iters}", "--set", "params.warmup=2", "--set", "timeout_s=120"]
    args += ["--set", "params.budget_s=null"]  # exactly `iters` round trips, however slow the link
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise LabError(f"`{' '.join(args[1:])}` failed: {proc.stderr.strip()[-500:]}", step="pingpong")
    rows = json.loads((out / "latest" / "result.json").read_text())["rows"]
    try:
        fit = fit_alpha_beta([r["size"] for r in rows], [r["ours_us"] * 1e-6 for r in rows])
    except ValueError:
        return None
    return fit.alpha_s, fit.beta_bytes_per_s


GAPS_S = (50e-6, 200e-6, 1e-3)


def spaced_one_way_us(gap_s: float, delay_s: float = 0.0, count: int = 300) -> float:
    """Median one-way time (us), less `delay_s`, of 8-byte messages from host 0 to host 1 through
    our transports (behind a DelayedTransport when `delay_s`), each posted `gap_s` after the
    previous one and stamped with its post time (the hosts share one kernel, so one clock)."""
    cluster = netns.Cluster(2).create()
    endpoints = [f"tcp://{host_addr(k)}:5999" for k in range(2)]
    read, write = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # host 1: receive, write the median back
            try:
                netns.enter(cluster.host_ns[1])
                ctx = zmq.Context()
                pull = ctx.socket(zmq.PULL)
                pull.bind(endpoints[1])
                receiver = ZmqTransport(1, ctx, pull, endpoints, "tcp")
                os.write(write, b"r")
                lat = []
                for _ in range(count):
                    msg = receiver.receive(10_000)
                    if msg is None:
                        raise WaitTimeout(
                            "the probe's receiver got nothing for 10 s", what="a probe", waited_s=10.0
                        )
                    lat.append(time.monotonic() - msg.array()[0] - delay_s)
                os.write(write, f"{statistics.median(lat[count // 10 :]) * 1e6:.3f}".encode())
            finally:
                os._exit(0)
        os.read(read, 1)
        with netns.entered(cluster.host_ns[0]):  # ZeroMQ's I/O threads are born inside, and gone after
            ctx = zmq.Context()
            pull = ctx.socket(zmq.PULL)
            sender: Transport = ZmqTransport(0, ctx, pull, endpoints, "tcp")
            if delay_s:
                sender = DelayedTransport(sender, 0, ctx, endpoints, ["h0", "h1"], delay_s)
            for _ in range(count):
                time.sleep(gap_s)
                sender.send(1, 0, np.array([time.monotonic()]))
            result = float(os.read(read, 64))
            os.waitpid(pid, 0)
            sender.close()
            ctx.term()
        return result
    finally:
        cluster.destroy()


def _spread(values: list[float], scale: float, fmt: str) -> str:
    if not values:
        return "-"
    v = [x * scale for x in values]
    return f"{statistics.median(v):{fmt}} ({min(v):{fmt}}-{max(v):{fmt}})"


Setting = tuple[str, str, tuple[int, ...], int]  # (alpha or beta, link spec, message sizes, ping-pongs)
Fit = tuple[float, float] | None  # (alpha_s, beta bytes/s) of one run, None without a fit


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m playground.hosts.bench", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rates", default="100mbit,1gbit,10gbit")
    p.add_argument("--delay", default="200us")
    p.add_argument("--iters", type=int, default=8, help="ping-pongs per size for beta (alpha: 10x)")
    p.add_argument("--probe", action="store_true", help="only the one-way probe after idle gaps")
    args = p.parse_args(argv)
    rates = [parse_rate(r) for r in args.rates.split(",")]
    delay_s = parse_duration(args.delay)
    delays = ["", f",delay={format_duration(delay_s)}", f",delay={format_duration(2 * delay_s)}"]
    settings: list[Setting] = [("beta", format_rate(r), beta_sizes(r), args.iters) for r in rates]
    settings += [("alpha", f"{ALPHA_RATE}{d}", SMALL_SIZES, 10 * args.iters) for d in delays]
    if args.probe:
        settings = []
    measured, spaced = measure(settings, delay_s, args.repeats)
    if settings:
        print(f"\n{args.repeats} rounds, settings alternating; median (min-max)")
        print_beta_table(measured, rates)
        print_alpha_table(measured, delays)
    print(
        f"\n| 8 B messages posted this long after the previous one | one way (us) | delayed {format_duration(delay_s)}, less the delay (us) |"
    )
    print("|---|---|---|")
    for gap in GAPS_S:
        print(
            f"| {format_duration(gap)} | {_spread(spaced[gap, 0.0], 1, '.1f')} | {_spread(spaced[gap, delay_s], 1, '.1f')} |"
        )
    return 0


def measure(
    settings: list[Setting], delay_s: float, repeats: int
) -> tuple[dict[tuple[str, str], list[Fit]], dict[tuple[float, float], list[float]]]:
    """`repeats` rounds, each the one-way probes after every gap (undelayed and delayed) then every
    setting's ping-pongs, the settings' order turned by one each round; each line printed as it comes."""
    measured: dict[tuple[str, str], list[Fit]] = {(what, link): [] for what, link, _, _ in settings}
    spaced: dict[tuple[float, float], list[float]] = {(g, d): [] for g in GAPS_S for d in (0.0, delay_s)}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(repeats):
            for (gap, d), got in spaced.items():
                got.append(spaced_one_way_us(gap, d))
            shown = [round(v[-1], 1) for v in spaced.values()]
            print(f"round {k + 1}: one way after a gap, undelayed and delayed (us): {shown}", flush=True)
            turn = k % max(1, len(settings))
            for what, link, sizes, iters in settings[turn:] + settings[:turn]:
                fit = pingpong(link, sizes, iters, Path(tmp))
                measured[what, link].append(fit)
                line = (
                    f"alpha {fit[0] * 1e6:8.1f} us, beta {fit[1] * 8 / 1e9:7.3f} Gbit/s" if fit else "no fit"
                )
                print(f"round {k + 1}: {link:>22}: {line}", flush=True)
    return measured, spaced


def print_beta_table(measured: dict[tuple[str, str], list[Fit]], rates: list[int]) -> None:
    print("| link | sizes | beta (Gbit/s) | beta / rate |")
    print("|---|---|---|---|")
    for rate in rates:
        link = format_rate(rate)
        betas = [got[1] * 8 for got in measured["beta", link] if got]
        sizes = ", ".join(format_size(s) for s in beta_sizes(rate))
        print(f"| {link} | {sizes} | {_spread(betas, 1e-9, '.3f')} | {_spread(betas, 1 / rate, '.3f')} |")


def print_alpha_table(measured: dict[tuple[str, str], list[Fit]], delays: list[str]) -> None:
    """alpha per added delay, and how much each delay step raised it within one round."""
    runs = [measured["alpha", f"{ALPHA_RATE}{d}"] for d in delays]
    sizes = ", ".join(format_size(s) for s in SMALL_SIZES)
    print(
        f"\n| link ({sizes}) | alpha (us) | rise over the row above, same round (us) | runs without a fit |"
    )
    print("|---|---|---|---|")
    for k, d in enumerate(delays):
        alphas = [got[0] for got in runs[k] if got]
        rises = [] if k == 0 else [b[0] - a[0] for a, b in zip(runs[k - 1], runs[k], strict=True) if a and b]
        rise = _spread(rises, 1e6, ".1f") if k else ""
        print(
            f"| {ALPHA_RATE}{d.replace(',', ', ')} | {_spread(alphas, 1e6, '.1f')} | {rise} | {len(runs[k]) - len(alphas)} |"
        )


if __name__ == "__main__":
    sys.exit(main())
