"""The layers of `playground/` point one way: a module imports only from its own layer or below,
a lab never imports another lab, and no modules import each other in a circle.

Each layer is a set of folders under `playground/` (the labs' nodes in `nodes/` are in the labs
layer too); the order is the picture in docs/architecture.md, and this test reads the picture, so
the page and the rule cannot drift apart. Every import counts: absolute or relative, inside a
function too, and `import_module("...")` with a literal name.
"""

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "playground"

# Bottom to top: (layer, its folders under playground/; `nodes/` is the labs' nodes, and `__init__`,
# `__main__` the package's own two files).
LAYERS = [
    ("basics", "core/ tracing/ display/"),
    ("comm", "comm/"),
    ("models", "models/ transformer/"),
    ("collectives", "collectives/"),
    ("sim", "sim/"),
    ("config", "config/"),
    ("rendezvous", "rendezvous/"),
    ("hosts", "hosts/"),
    ("launcher", "launcher/"),
    ("kvcache", "kvcache/"),
    ("labs", "buckets/ concurrency/ kvlab/ memlab/ network/ queueing/ serving/ baselines/ training/ nodes/"),
    ("top", "cli/ commands/ chaos/ diagram/ lecture/ api/ __init__ __main__"),
]
LAB_LAYER = "labs"


def _unit(module: str) -> str:
    """The folder (or top file) a module belongs to: `playground.comm.mailbox` -> `comm/`,
    `nodes.ring` -> `nodes/`, `playground` -> `__init__`."""
    parts = module.split(".")
    if parts[0] == "nodes":
        return "nodes/"
    if len(parts) == 1:
        return "__init__"
    return f"{parts[1]}/" if (PACKAGE / parts[1]).is_dir() else parts[1]


def _modules(root: Path = ROOT, tops: tuple[str, ...] = ("playground", "nodes")) -> dict[str, Path]:
    mods = {}
    for top in tops:
        for path in (root / top).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


def imported_names(module: str, path: Path) -> set[str]:
    """Every name `module` (the file at `path`) imports, as dotted absolute names: `import a.b`,
    `from a import b` (-> a.b), relative imports resolved against the module's package, and
    `import_module("a.b")` / `importlib.import_module("a.b")` with a literal string."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names |= {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == "import_module" and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of ours it imports (the deepest existing module named)."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    return {
        name: {r for t in imported_names(name, path) if (r := resolve(t)) and r != name}
        for name, path in mods.items()
    }


def _layer_of() -> dict[str, tuple[int, str]]:
    return {unit: (i, layer) for i, (layer, units) in enumerate(LAYERS) for unit in units.split()}


def test_every_module_sits_in_a_layers_folder():
    layer_of = _layer_of()
    missing = sorted({_unit(m) for m in _modules()} - set(layer_of))
    assert not missing, f"put these in a folder of a layer in LAYERS (and docs/architecture.md): {missing}"
    folders = {f"{p.name}/" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders | {"nodes/", "__init__", "__main__"} == set(layer_of)


def _violations(graph: dict[str, set[str]], layer_of: dict[str, tuple[int, str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        unit = _unit(module)
        i, layer = layer_of[unit]
        for target in targets:
            other_unit = _unit(target)
            j, other = layer_of[other_unit]
            if j > i:
                wrong.append(f"{module} ({layer}) imports {target} ({other}), a layer above it")
            elif layer == other == LAB_LAYER and "nodes/" not in (unit, other_unit) and unit != other_unit:
                wrong.append(f"{module} imports {target}: one lab from another (move the shared part down)")
            elif other_unit == "nodes/" and unit != "nodes/":
                wrong.append(f"{module} imports {target}: the framework never imports a node")
    return sorted(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_imports_point_down_and_labs_stay_apart():
    wrong = _violations(_imports(_modules()), _layer_of())
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    cycles = _cycles(_imports(_modules()))
    assert not cycles, f"modules that import each other in a circle: {cycles}"


def test_the_architecture_page_draws_these_layers():
    """docs/architecture.md's layer picture: one line per layer, top first, `name  folders`."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"<!-- layers -->\n```text\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```text block after <!-- layers -->"
    drawn = [line.split(None, 1) for line in block.group(1).splitlines() if line.strip()]
    assert [(name, set(members.replace(",", " ").split())) for name, members in drawn] == [
        (layer, set(units.split())) for layer, units in reversed(LAYERS)
    ]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_parser_finds_every_kind_of_import_in_real_source(tmp_path):
    """Source text with each kind of import, parsed from files as the real tree is."""
    _write(
        tmp_path,
        {
            "playground/__init__.py": "",
            "playground/cli/__init__.py": "",
            "playground/comm/__init__.py": "from . import local\n",
            "playground/comm/local.py": """
                import os
                import playground.core.errors
                from playground.tracing.trace import Tracer
                from .. import cli
                from ..rendezvous import join
                from . import wire as w


                def later():
                    from importlib import import_module
                    import importlib

                    import_module("playground.launcher.run")
                    importlib.import_module("nodes.ring")
                    import_module(os.environ["NODE"])  # not a literal: a plugin, not an import
                """,
        },
    )
    mods = _modules(tmp_path)
    assert set(mods) == {"playground", "playground.cli", "playground.comm", "playground.comm.local"}
    assert imported_names("playground.comm.local", mods["playground.comm.local"]) == {
        "os",
        "playground.core.errors",
        "playground.tracing.trace.Tracer",
        "playground.cli",
        "playground.rendezvous.join",
        "playground.comm.wire",
        "importlib.import_module",
        "importlib",
        "playground.launcher.run",
        "nodes.ring",
    }
    assert imported_names("playground.comm", mods["playground.comm"]) == {"playground.comm.local"}


def test_the_checks_catch_what_they_should():
    """An upward import, one lab importing another, the framework importing a node, and a circle."""
    graph = {
        "playground.comm.local": {"playground.rendezvous.join"},  # comm imports from a layer above
        "playground.kvlab.replay": {"playground.memlab.allocation"},  # a lab imports a lab
        "playground.training.loop": {"nodes.train"},  # the framework imports a node
        "nodes.train": {"playground.training.loop", "playground.core.errors"},  # legal: a lab's node
        "playground.sim.engine": {"playground.sim.transport"},  # a circle inside one layer
        "playground.sim.transport": {"playground.sim.engine", "playground.core.errors"},  # and a legal import
    }
    assert _violations(graph, _layer_of()) == [
        "playground.comm.local (comm) imports playground.rendezvous.join (rendezvous), a layer above it",
        "playground.kvlab.replay imports playground.memlab.allocation: one lab from another "
        "(move the shared part down)",
        "playground.training.loop imports nodes.train: the framework never imports a node",
    ]
    assert _cycles(graph) == [
        ["nodes.train", "playground.training.loop"],
        ["playground.sim.engine", "playground.sim.transport"],
    ]
