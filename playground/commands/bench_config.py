"""What `bench COLLECTIVE` and `bench p2p` are given: their flags, checked once into a frozen config
that the measuring code only reads (`bench table`'s and `bench copy`'s are beside their code:
benchtable.py, copybw.py).

`from_flags` takes the flags as the command line parsed them or as the Python API's keywords
(`pg.bench("allreduce", ranks=4, algo=["ring", "tree"])`), with the command's defaults; a bad value
is one ScenarioError naming the flag. Our own runs are scenarios (the collective's is `bench`, p2p's
`pingpong`): the flags become scenario overrides, each remembering the flag it came from, so a
value the scenario refuses is named by its flag too.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from playground.collectives import ALGORITHMS, IN_PLACE
from playground.comm.registry import LAUNCHED
from playground.config.scenario import Scenario, load_scenario
from playground.core import flags
from playground.core.dtypes import DTYPES
from playground.core.errors import ScenarioError
from playground.core.flags import Repeated, Text
from playground.models.calibration import model_from_spec
from playground.sim.options import OPS

COLLECTIVE_SIZES = "8..64MiB"
P2P_SIZES = "64,4KiB,64KiB,1MiB,4MiB,16MiB"


@dataclass(frozen=True)
class BenchConfig:
    """`bench COLLECTIVE`: our run (the `bench` scenario with the flags in it) and what the
    baselines beside it need."""

    scenario: Scenario
    collective: str
    sizes: tuple[int, ...]
    dtype: str
    op: str
    iters: int
    warmup: int
    timeout_s: float
    baselines: tuple[str, ...]
    out: Path

    @classmethod
    def from_flags(
        cls,
        collective: str,
        *,
        ranks: int = 8,
        algo: Text | None = None,
        sizes: Text = COLLECTIVE_SIZES,
        step: int = 2,
        transport: str = "ipc",
        dtype: str = "float32",
        op: str = "sum",
        iters: int = 20,
        warmup: int = 5,
        segment: str | None = None,
        no_check: bool = False,
        inplace: bool = False,
        link: str | None = None,
        baseline: Text = "",
        trace_messages: bool = False,
        timeout: float = 60.0,
        out: str | Path = "runs",
        set: Repeated = (),  # noqa: A002 - the flag's name, `--set`
    ) -> "BenchConfig":
        command = f"bench {collective}"
        flags.choice("bench", "collective", collective, ALGORITHMS)
        _choices(command, transport=transport, dtype=dtype, op=op)
        ranks = flags.integer(command, "--ranks/-n", ranks)
        iters = flags.integer(command, "--iters/-i", iters)
        warmup = flags.integer(command, "--warmup/-w", warmup)
        timeout_s = flags.number(command, "--timeout", timeout)
        step = flags.integer(command, "--step", step)
        size_list = flags.sizes("--sizes", sizes, step)
        algos = flags.items(algo) or tuple(a for a in ALGORITHMS[collective] if a != "auto")
        baselines = flags.items(baseline)
        said = {  # each override -> the flag it came from, which a bad value's error names
            f"params.collective={collective}": "COLLECTIVE",
            f"params.algorithm=[{','.join(algos)}]": "--algo",
            f"params.sizes=[{','.join(map(str, size_list))}]": "--sizes",
            f"params.dtype={dtype}": "--dtype",
            f"params.op={op}": "--op",
            f"params.iters={iters}": "--iters",
            f"params.warmup={warmup}": "--warmup",
            f"params.check={not no_check}": "--no-check",
            f"params.trace_messages={trace_messages}": "--trace-messages",
            f"timeout_s={timeout_s}": "--timeout",
        }
        if segment:
            said[f"params.segment_bytes={segment}"] = "--segment"
        if inplace or (baselines and collective in IN_PLACE):
            said["params.inplace=true"] = "--inplace" if inplace else "--baseline"
        if link:
            said[f"params.link={json.dumps(_checked_link(link, transport))}"] = "--link"
        said.update({text: f"--set {text}" for text in flags.repeated(set)})
        scenario = load_scenario("bench", ranks=ranks, transport=transport, overrides=list(said), said=said)
        _check_baselines(collective, baselines)
        return cls(scenario, collective, size_list, dtype, op, iters, warmup, timeout_s, baselines, Path(out))


@dataclass(frozen=True)
class P2PConfig:
    """`bench p2p`: the `pingpong` scenario with the flags in it (our send/recv beside raw pyzmq)."""

    scenario: Scenario
    out: Path

    @classmethod
    def from_flags(
        cls,
        *,
        ranks: int = 2,
        sizes: Text = P2P_SIZES,
        step: int = 2,
        transport: str = "ipc",
        iters: int = 20,
        warmup: int = 5,
        trace_messages: bool = False,
        timeout: float = 60.0,
        out: str | Path = "runs",
        set: Repeated = (),  # noqa: A002 - the flag's name, `--set`
    ) -> "P2PConfig":
        command = "bench p2p"
        _choices(command, transport=transport)
        step = flags.integer(command, "--step", step)
        size_list = flags.sizes("--sizes", sizes, step)
        said = {
            f"params.sizes=[{','.join(map(str, size_list))}]": "--sizes",
            f"params.iters={flags.integer(command, '--iters/-i', iters)}": "--iters",
            f"params.warmup={flags.integer(command, '--warmup/-w', warmup)}": "--warmup",
            f"timeout_s={flags.number(command, '--timeout', timeout)}": "--timeout",
            f"params.trace_messages={trace_messages}": "--trace-messages",
            **{text: f"--set {text}" for text in flags.repeated(set)},
        }
        ranks = flags.integer(command, "--ranks/-n", ranks)
        scenario = load_scenario(
            "pingpong", ranks=ranks, transport=transport, overrides=list(said), said=said
        )
        return cls(scenario, Path(out))


def _checked_link(link: str, transport: str) -> str:
    """A link the model columns can price (a preset, or a calibration.json)."""
    try:
        model_from_spec(link, transport)
    except ScenarioError as e:
        raise ScenarioError(f"--link {link}: {e}") from None
    return link


def _check_baselines(collective: str, baselines: tuple[str, ...]) -> None:
    if baselines:
        from playground.baselines import BASELINES
        from playground.baselines import COLLECTIVES as BASELINE_COLLECTIVES

        for name in baselines:
            if name not in BASELINES:
                raise ScenarioError(f"--baseline {name!r}: allowed: {', '.join(BASELINES)}")
        if collective not in BASELINE_COLLECTIVES:
            raise ScenarioError(f"--baseline: the baselines run {', '.join(BASELINE_COLLECTIVES)}")


def _choices(command: str, **given: str) -> None:
    allowed = {"transport": LAUNCHED, "dtype": DTYPES, "op": OPS}
    for name, value in given.items():
        flag = {"transport": "--transport", "dtype": "--dtype/-d", "op": "--op/-o"}[name]
        flags.choice(command, flag, value, allowed[name])
