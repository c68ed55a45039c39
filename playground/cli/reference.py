"""The docs' reference pages, made from the code so they cannot drift from it.

- the command line, from the argparse parsers (`cli.build_parser`; the defaults of a command with a
  config from its `from_flags`);
- the scenarios: every key of a scenario file and of every built-in scenario's `Params`, with its
  type, default, allowed values and the one-line comment written beside the field in the code;
- the registries (algorithms, transports, link presets, KV policies) and the environment variables.

`docs/gen_reference.py` writes them into the site at build time (mkdocs-gen-files); nothing generated
is committed. A field's doc is the comment on its line (`block_size: int = 16  # tokens per block`)
or the comment lines right above it.
"""

import argparse
import dataclasses
import html
import inspect
import io
import re
import textwrap
import tokenize
import typing
from typing import get_args, get_origin

import yaml

from playground.config.params import describe_type, parses_itself, plain_value

_CODE_SPAN = re.compile(r"(`[^`]*`)")
_MARKDOWN = str.maketrans({"\\": "\\\\", "*": "\\*", "_": "\\_", "<": "&lt;", ">": "&gt;"})


def _text(text) -> str:
    """Prose from the code (a help string, a field's comment) as Markdown that shows it literally:
    `PMI_*` is no emphasis, `runs/<timestamp>` no HTML tag. Code spans (`...`) are kept as written."""
    parts = _CODE_SPAN.split(str(text))
    return "".join(part if i % 2 else part.translate(_MARKDOWN) for i, part in enumerate(parts))


class _Html(str):
    """A cell that is already HTML (`_cell` leaves it as it is)."""


def _code(text: str) -> _Html:
    """A code cell that wraps where a name has seams (after `_ . / ,`), never inside a word: raw
    HTML, since a Markdown code span cannot hold the break points (<wbr>)."""
    escaped = html.escape(text).replace("_", "&#95;")
    return _Html("<code>" + re.sub(r"(&#95;|[./,])(?=.)", r"\1<wbr>", escaped) + "</code>")


def _cell(text) -> str:
    return text if isinstance(text, _Html) else _text(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# -- the command line -------------------------------------------------------------------------------
USAGE_WIDTH = 76  # what a code block on the site shows without scrolling


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage, wrapped as argparse wraps it in a terminal (between arguments, never inside one)."""
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)  # what every parser of ours uses
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip("\n")


def _flag_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    config_defaults = _config_defaults(parser)
    rows = []
    for action in parser._actions:  # argparse keeps no public list of a parser's arguments
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
        if action.choices is not None and not isinstance(action.choices, dict):
            allowed = ", ".join(map(str, action.choices))
        elif action.metavar:
            allowed = str(action.metavar)
        else:
            allowed = ""
        default = config_defaults.get(action.dest) if action.default is argparse.SUPPRESS else action.default
        rows.append([name, allowed, default if default not in (None, False, ()) else "", action.help or ""])
    return rows


def _config_defaults(parser: argparse.ArgumentParser) -> dict:
    """A command with a config takes its flags' defaults from it (its parser has none of its own)."""
    from playground.core.flags import defaults

    make = getattr(parser._defaults.get("func"), "make", None)
    return defaults(make) if make is not None else {}


def _leaves(
    name: str, parser: argparse.ArgumentParser, help: str
) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(`command sub-command`, its parser, its help) of every command that runs, sub-commands in order."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(name, parser, help)]
    helps = {a.dest: a.help or "" for a in subs[0]._choices_actions}
    return [leaf for sub, p in subs[0].choices.items() for leaf in _leaves(f"{name} {sub}", p, helps[sub])]


def cli_reference() -> str:
    """Every subcommand: its usage, what it does, and each argument. Sub-commands with the same
    arguments (bench's collectives) share one table."""
    from playground.cli import build_parser

    parser = build_parser()
    (subactions,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {a.dest: a.help for a in subactions._choices_actions}
    out = [
        "# Command line\n",
        "Made from the argparse parsers (`playground/cli/` and the modules it calls) each time the "
        "docs are built. `python -m playground COMMAND --help` prints the same.\n",
    ]
    for name, sub in subactions.choices.items():
        out.append(f"## `{name}`\n")
        out.append(f"{_text(helps.get(name) or '')}\n")
        if sub.description and sub.description != helps.get(name):
            out.append(f"{_text(sub.description)}\n")
        leaves = _leaves(name, sub, helps.get(name) or "")
        if len(leaves) == 1:
            out.append(_arguments(sub))
            continue
        groups: dict[str, list[tuple[str, str]]] = {}  # the arguments' table -> the leaves that have it
        for leaf, p, help in leaves:
            groups.setdefault(_arguments(p, usage=False), []).append((leaf, help))
        for table, named in groups.items():
            out.append("### " + ", ".join(f"`{leaf}`" for leaf, _ in named) + "\n")
            if len({help for _, help in named}) == 1:
                out.append(f"{_text(named[0][1])}\n")
            example = next(p for leaf, p, _ in leaves if leaf == named[0][0])
            out.append(f"```text\n{_usage(example)}\n```\n")
            out.append(table)
    return "\n".join(out)


def _arguments(parser: argparse.ArgumentParser, usage: bool = True) -> str:
    rows = _flag_rows(parser)
    table = _table(["argument", "values", "default", "what"], rows) if rows else "No arguments.\n"
    return f"```text\n{_usage(parser)}\n```\n\n{table}" if usage else table


# -- scenarios ----------------------------------------------------------------------------------------
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the comment written beside it (or right above it) in the class's source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments = {}  # line number -> comment text
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    import ast

    docs = {}
    (node,) = ast.parse(source).body
    if not isinstance(node, ast.ClassDef):
        return {}
    for stmt in node.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        text = " ".join(
            comments[n] for n in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1) if n in comments
        )
        if not text:  # the comment lines right above the field
            above: list[str] = []
            n = stmt.lineno - 1
            while n >= 1 and lines[n - 1].strip().startswith("#"):
                above.insert(0, comments.get(n, ""))
                n -= 1
            text = " ".join(above)
        docs[stmt.target.id] = text
    return docs


def _nested(tp) -> type | None:
    """The dataclass a field holds (directly, in a tuple, or optionally), if any; not one that
    parses itself from one value (a training `Mode`)."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and not parses_itself(tp):
        return tp
    for arg in get_args(tp):
        found = _nested(arg)
        if found:
            return found
    return None


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    first = value[0] if isinstance(value, tuple) and value else None
    if dataclasses.is_dataclass(value) and not parses_itself(type(value)):
        return "(see below)"
    if dataclasses.is_dataclass(first) and not parses_itself(type(first)):
        return f"{len(value)} entries (see below)"
    return (
        yaml.safe_dump(plain_value(value), default_flow_style=True, width=1000)
        .strip()
        .removesuffix("...")
        .strip()
    )


def param_rows(cls: type, prefix: str = "", nested_too: bool = True) -> list[list[str]]:
    """One row per key of dataclass `cls` (nested dataclasses' keys after their parent's, unless
    not `nested_too`): key, type and allowed values, default, doc."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    rows, nested = [], []
    for field in dataclasses.fields(cls):
        if not field.init or field.name in ("source", "function"):  # Scenario's, not keys of a file
            continue
        tp = hints[field.name]
        inner = _nested(tp)
        kind = "a list of mappings" if inner and get_origin(tp) in (tuple, list) else describe_type(tp)
        rows.append([f"`{prefix}{field.name}`", kind, _default(field), docs.get(field.name, "")])
        if inner and nested_too:
            sub = f"{prefix}{field.name}[]." if get_origin(tp) in (tuple, list) else f"{prefix}{field.name}."
            nested += param_rows(inner, sub)
    return rows + nested


def undocumented_fields(cls: type, prefix: str = "") -> list[str]:
    """Keys of `cls` (and its nested dataclasses) with no comment: the reference would show none."""
    return [row[0].strip("`") for row in param_rows(cls, prefix) if not row[3]]


def builtin_scenarios() -> list[tuple[str, dict, type | None, object]]:
    """(name, raw YAML, Params class or None, node module) of every built-in scenario."""
    from playground.config.node import load_node
    from playground.config.scenario import builtin_dir, builtin_names

    out: list[tuple[str, dict, type | None, object]] = []
    for name in builtin_names():
        raw = yaml.safe_load((builtin_dir() / f"{name}.yaml").read_text()) or {}
        node = load_node(raw["node"])
        out.append((name, raw, node.contract.params, node.module))
    return out


def scenario_reference() -> str:
    from playground.config.node import contract_of
    from playground.config.recovery import Recovery
    from playground.config.scenario import Fault, Scenario
    from playground.core.topology import Link

    out = [
        "# Scenarios\n",
        "Made from the code each time the docs are built: every key a scenario file takes, then, per "
        "node, every key of its `params:` (its `Params` dataclass) with the value each built-in "
        "scenario gives it. Unknown keys and bad values are one line and exit status 2, before any "
        "process starts. `--set KEY=VALUE` sets any of them from the command line (`--set "
        "params.sizes=[8,1MiB]`, `--set fault.rank=1`).\n",
        "## A scenario file\n",
        _table(["key", "type", "default", "what"], param_rows(Scenario, nested_too=False)),
        "### `fault:` (drills)\n",
        f"```text\n{inspect.getdoc(Fault) or ''}\n```\n",
        _table(["key", "type", "default", "what"], param_rows(Fault, "fault.")),
        "### `link:` (with `hosts:`)\n",
        _table(["key", "type", "default", "what"], param_rows(Link, "link.")),
        "### `recovery:` (restarts)\n",
        f"```text\n{inspect.getdoc(Recovery) or ''}\n```\n",
        _table(["key", "type", "default", "what"], param_rows(Recovery, "recovery.")),
    ]
    by_node: dict[str, list] = {}
    for name, raw, params_cls, module in builtin_scenarios():
        by_node.setdefault(raw["node"], []).append((name, raw, params_cls, module))
    for node, scenarios in sorted(by_node.items()):
        names = ", ".join(f"`{s[0]}`" for s in scenarios)
        _, _, params_cls, module = scenarios[0]
        out.append(f"## `{node}`: {names}\n")
        doc = (inspect.getdoc(module) or "").split("\n\n")[0]
        out.append(f"{_text(' '.join(doc.split()))}\n")
        ranks = contract_of(module).ranks
        out.append(
            _table(
                ["scenario", "ranks", "what", "params it sets"],
                [
                    [
                        f"`{name}`",
                        raw.get("ranks", 2) if ranks is None else ranks.exactly,
                        raw.get("description", ""),
                        ", ".join(f"`{k}: {_flow(v)}`" for k, v in (raw.get("params") or {}).items()),
                    ]
                    for name, raw, _, _ in scenarios
                ],
            )
        )
        if params_cls is not None:
            out.append(_table(["key", "type", "default", "what"], param_rows(params_cls, "params.")))
    return "\n".join(out)


def _flow(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


# -- registries and the environment ----------------------------------------------------------------------
def registries_reference() -> str:
    from playground.collectives.registry import REGISTRY
    from playground.comm.registry import KINDS
    from playground.kvcache.engine.policies import POLICIES
    from playground.models.costs import PRESETS

    return "\n".join(
        [
            "# Registries\n",
            "One table per concept; every list of names in the code derives from these "
            "([Architecture](../architecture.md#one-registry-per-concept) says how to add one).\n",
            "## Collective algorithms (`playground/collectives/registry.py`)\n",
            _table(
                ["collective", "algorithm", "module", "cost formula", "what"],
                [
                    [a.collective, f"`{a.name}`", _module(a.run), _code(_name(a.cost)), a.summary]
                    for a in REGISTRY
                ],
            ),
            "## Transports (`playground/comm/registry.py`)\n",
            _table(
                ["name", "`run --transport`", "what"],
                [[f"`{k.name}`", "yes" if k.launched else "no", k.summary] for k in KINDS],
            ),
            "## Link presets (`playground/models/costs.py`)\n",
            _table(["name", "link"], [[f"`{n}`", link.describe()] for n, link in PRESETS.items()]),
            "## KV-cache policies (`playground/kvcache/engine/policies.py`)\n",
            _table(["name", "what"], [[f"`{p.name}`", p.summary] for p in POLICIES.values()]),
        ]
    )


def _module(fn) -> str:
    """`collectives/ring.py`: the algorithm's file, below playground/."""
    return _code(f"{fn.__module__.removeprefix('playground.').replace('.', '/')}.py")


def _name(fn) -> str:
    name = getattr(fn, "__name__", "")
    return "allreduce_hier_time_s on one node" if name == "<lambda>" else name


def environment_reference() -> str:
    from playground.core.environment import VARIABLES

    return "\n".join(
        [
            "# Environment variables\n",
            "Every `PLAYGROUND_*` variable the playground reads (`playground/core/environment.py`). A run is "
            "configured by its scenario and flags; these exist where a value must reach a process before "
            "it has read its scenario, or where a test or a benchmark needs a lever the interface does "
            "not offer.\n",
            _table(
                ["variable", "set by", "what"], [[f"`{v.name}`", v.who_sets_it, v.meaning] for v in VARIABLES]
            ),
        ]
    )


PAGES = {
    "reference/cli.md": cli_reference,
    "reference/scenarios.md": scenario_reference,
    "reference/registries.md": registries_reference,
    "reference/environment.md": environment_reference,
}
