"""Bad input to any command is one line on stderr and exit status 2, argparse's own errors too:
every option of every subcommand is tried with what argparse refuses (an unknown flag, a value of
the wrong type, a choice that is not one, a missing value, a missing positional), read from the
parser itself so that a new flag is covered without a new test. Misspelt names get a "did you mean"."""

import argparse
import subprocess
import sys

import pytest

from playground import cli
from playground.cli import build_parser, main
from playground.core.argparser import OneLineParser
from playground.core.rundir import EXIT_BAD_INPUT
from playground.core.suggest import closest, did_you_mean

PARSER = build_parser(OneLineParser)


def _commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> dict[str, argparse.ArgumentParser]:
    """Every command that runs, by its words (`bench table`): a command with sub-commands is theirs."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {" ".join(words): parser}
    return {k: v for name, sub in subs[0].choices.items() for k, v in _commands(sub, (*words, name)).items()}


COMMANDS = _commands(PARSER)


def _positionals(sub: argparse.ArgumentParser) -> list[str]:
    """Values for a command's required positionals (a choice's first, else a scenario name)."""
    out = []
    for a in sub._actions:
        if not a.option_strings and a.dest != "help" and a.nargs is None:
            out.append(sorted(a.choices)[0] if a.choices else "ring")
    return out


def _bad_arguments() -> list[tuple[str, list[str], str]]:
    """(case id, argv, what the one line must say) for every option argparse itself can refuse."""
    cases = [("no-command", [], "the following arguments are required: command")]
    cases.append(("misspelt-command", ["rnu", "ring"], "unknown command 'rnu'; did you mean 'run'?"))
    cases.append(
        (
            "misspelt-bench-command",
            ["bench", "alreduce"],
            "unknown bench command 'alreduce'; did you mean 'allreduce'?",
        )
    )
    for name, sub in COMMANDS.items():
        base = [*name.split(), *_positionals(sub)]
        cases.append((f"{name}-unknown-flag", [*base, "--no-such-flag"], "unknown argument --no-such-flag"))
        if len(base) > len(name.split()):
            cases.append((f"{name}-missing-positional", name.split(), "the following arguments are required"))
        for a in sub._actions:
            if not a.option_strings or a.nargs == 0 or a.dest == "help":
                continue
            flag = max(a.option_strings, key=len)
            cases.append((f"{name}{flag}-no-value", [*base, flag], f"{flag}: expected a value"))
            if a.type in (int, float):
                words = "an integer" if a.type is int else "a number"
                cases.append((f"{name}{flag}-type", [*base, flag, "x"], f"{flag} 'x': expected {words}"))
            if a.choices:
                first = sorted(a.choices)[0]
                cases.append(
                    (f"{name}{flag}-choice", [*base, flag, first + "zz"], f"did you mean {first!r}?")
                )
        if any(not a.option_strings and a.choices for a in sub._actions):
            positional = next(a for a in sub._actions if not a.option_strings and a.choices)
            first = sorted(positional.choices)[0]
            cases.append((f"{name}-choice", [*name.split(), first[:-1] + "x"], "expected one of"))
    return cases


CASES = _bad_arguments()


@pytest.mark.parametrize(("argv", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_bad_argument_of_every_command_is_one_line_and_exit_2(capsys, argv, says):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == EXIT_BAD_INPUT, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "usage:" not in err, err
    assert says in err, err


def test_the_cases_cover_every_command_and_typed_option():
    ids = " ".join(c[0] for c in CASES)
    assert all(f"{name}-unknown-flag" in ids for name in COMMANDS) and len(COMMANDS) >= 10
    assert "chaos--seed-type" in ids and "run--transport-choice" in ids and "bench table--rounds-type" in ids
    assert "bench allreduce--ranks-type" in ids and "misspelt-bench-command" in ids


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["chaos", "--seed", "x"],
            "error: chaos --seed 'x': expected an integer (python -m playground chaos --help)",
        ),
        (
            ["run", "ring", "--transport", "zmq"],
            "error: run --transport 'zmq': expected one of ipc, tcp, shm",
        ),
        (
            ["run", "ring", "--transprot", "shm"],
            "unknown argument --transprot shm; did you mean --transport?",
        ),
        (["inspect", "--diagram-time", "reel"], "'reel': did you mean 'real'? expected one of logical, real"),
        (  # a flag of another sub-command
            ["bench", "allreduce", "--rounds", "2"],
            "error: bench allreduce: unknown argument --rounds 2; did you mean --ranks?",
        ),
        (["bench", "p2p", "--rank-counts", "2,4"], "bench p2p: unknown argument --rank-counts 2,4"),
    ],
)
def test_argparse_errors_read_as_the_playgrounds(capsys, argv, says):
    with pytest.raises(SystemExit):
        main(argv)
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "rnig"], "error: unknown scenario 'rnig'; did you mean 'ring'? built-in: "),
        (["run", "ring", "--set", "params.itres=5"], "unknown key; did you mean 'iters'? allowed: "),
        (["run", "ring", "--set", "transprot=shm"], "unknown key; did you mean 'transport'? allowed: "),
        (["bench", "allreduce", "--ranks", "0"], "error: --ranks: expected an integer from 1 to 64, got 0"),
        (["run", "serving", "--set", "params.model=/etc/passwd"], "/etc/passwd is not a model file"),
    ],
)
def test_a_misspelt_name_or_a_value_the_command_refuses_is_one_line(capsys, runs_dir, argv, says):
    assert main([*argv, *(["--out", str(runs_dir)] if argv[0] in ("run", "bench") else [])]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err
    assert "allow_pickle" not in err and "pickle" not in err
    assert not runs_dir.exists()  # refused before anything was made


def test_did_you_mean_only_when_a_name_is_close():
    assert closest("rnig", ["ring", "tree"]) == "ring" and closest("xyz", ["ring", "tree"]) is None
    assert did_you_mean("itres", ["iters", "sizes"]) == "did you mean 'iters'? "
    assert did_you_mean("zzz", ["iters"]) == ""


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_a_command_parser_built_alone_is_the_one_built_with_all(command):
    """`parse_args` builds only the command given (its start-up then imports no other command's
    modules): that parser must be the very one the whole command line has."""
    alone = _commands(build_parser(OneLineParser, only=command))
    whole = _commands(build_parser(OneLineParser))  # now too: a default may read the environment
    assert {k: v.format_help() for k, v in alone.items()} == {
        k: v.format_help() for k, v in whole.items() if k == command or k.startswith(command + " ")
    }


def test_run_and_a_rank_start_without_the_other_commands_rich_or_ml_dtypes():
    """What a `run` and each rank import at start: not the bench, chaos or lecture commands, not
    rich (a rank draws nothing), not ml_dtypes (half a second of CPU; imported once bfloat16 is named)."""
    heavy = ("playground.commands.bench_commands", "playground.chaos.command", "playground.lecture.command")
    code = (
        "import sys; from playground.cli import parse_args; parse_args(['run', 'ring']); "
        "import playground.launcher.worker, nodes.collective; "
        f"print([m for m in {(*heavy, 'rich', 'ml_dtypes')!r} if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
