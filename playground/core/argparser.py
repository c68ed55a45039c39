"""The command lines' parser, whose errors are one line and exit status 2, as every other bad input's
(`python -m playground` and each of its commands, the standalone servers and benchmarks).

argparse prints its usage (several lines) before its message; here the message alone, said as the
rest of the playground says bad input (the flag, the value, what is allowed), with "did you mean"
for a misspelt command, choice or flag, and the `--help` that lists the rest:

    error: chaos --seed 'x': expected an integer (python -m playground chaos --help)
"""

import argparse
import re
import sys

from playground.core.rundir import EXIT_BAD_INPUT
from playground.core.suggest import closest, did_you_mean

PROG = "python -m playground"
_TYPES = {"int": "an integer", "float": "a number"}
_INVALID_VALUE = re.compile(r"argument (\S+?)(?:/\S+)?: invalid (\w+) value: '(.*)'$")
_INVALID_CHOICE = re.compile(r"argument (\S+?)(?:/\S+)?: invalid choice: '(.*)' \(choose from (.*)\)$")
_NO_VALUE = re.compile(r"argument (\S+?)(?:/\S+)?: expected (one argument|at least one argument)$")
_UNKNOWN = re.compile(r"unrecognized arguments: (.*)$")


def _command(prog: str) -> str:
    """`chaos` for `python -m playground chaos`; "" for the top parser or another program."""
    return prog.removeprefix(PROG + " ").strip() if prog.startswith(PROG + " ") else ""


def _choices(text: str) -> list[str]:
    return re.findall(r"'([^']*)'", text) or [c.strip() for c in text.split(",")]


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser (and, through add_subparsers, each subcommand's) whose error is one line on
    stderr and exit status 2."""

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"error: {self.one_line(message)}\n")

    def one_line(self, message: str) -> str:
        """argparse's `message` as one line: what was wrong, a suggestion, where the flags are listed."""
        if m := _UNKNOWN.match(message):
            return self._unknown(m[1].split())
        return one_line(self.prog, message)

    def _unknown(self, words: list[str]) -> str:
        """Flags no parser took: named with the closest flag of the command they were given to."""
        parser = self._command_parser()
        flags = [s for s in parser._option_string_actions if s.startswith("--")]
        first = next((w for w in words if w.startswith("-")), words[0])
        best = closest(first.split("=")[0], flags) if first.startswith("-") else None
        said = f"; did you mean {best}?" if best else ""
        command = _command(parser.prog)
        return f"{command + ': ' if command else ''}unknown argument {' '.join(words)}{said} ({parser.prog} --help)"

    def _command_parser(self) -> argparse.ArgumentParser:
        """The (sub-)command's parser the arguments were given to (argparse reports leftovers from
        the top): `bench table`'s for `bench table --ranks 2`."""
        parser: argparse.ArgumentParser = self
        words = getattr(self, "_argv", [])
        while True:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            word = next((w for w in words if subs and w in subs[0].choices), None)
            if word is None:
                return parser
            parser, words = subs[0].choices[word], words[words.index(word) + 1 :]


def one_line(prog: str, message: str) -> str:
    """argparse's `message` about a flag of the parser `prog` as one line: what was wrong, a
    suggestion, where the flags are listed. The Python API says its keywords' errors with it, so
    that they read as the command line's."""
    command = _command(prog)
    where = f"{command} " if command else ""
    help_ = f" ({prog} --help)"
    if m := _INVALID_CHOICE.match(message):
        flag, value, allowed = m[1], m[2], _choices(m[3])
        if flag == "command" or flag.endswith("_command"):  # a sub-parser's dest (bench_command)
            said = f"{where}command {value!r}; {did_you_mean(value, allowed)}"
            return f"unknown {said}{where}commands: {', '.join(allowed)}"
        return f"{where}{flag} {value!r}: {did_you_mean(value, allowed)}expected one of {', '.join(allowed)}"
    if m := _INVALID_VALUE.match(message):
        return f"{where}{m[1]} {m[3]!r}: expected {_TYPES.get(m[2], f'a {m[2]} value')}{help_}"
    if m := _NO_VALUE.match(message):
        return f"{where}{m[1]}: expected a value{help_}"
    return f"{command + ': ' if command else ''}{message}{help_}"
