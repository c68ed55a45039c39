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
    ("basics", "core/ tracing/ display/ checkpoint/"),
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


# -- native/: the C sources of the native module ---------------------------------------------------
# A C file depends on a header it includes ("x.h") and on another C file whose function or object
# (not `static`) it names; the graph of those may hold no cycle, as the Python one may not.

NATIVE = ROOT / "native"
_C_NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_C_PREPROCESSOR = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)  # with its continued lines
_C_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")
_C_NAME = re.compile(r"(->|\.)?\s*\b([A-Za-z_]\w*)")
_NOT_EXPORTED = ("static", "extern", "typedef", "struct", "enum", "union")


def _c_code(text: str) -> str:
    """C text without comments, string and character literals (kept apart by a space)."""
    return _C_NOISE.sub(" ", text)


def c_includes(text: str) -> set[str]:
    """The local headers a C file includes: `#include "x.h"` (not `<x.h>`)."""
    return set(re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M))


def _last_name(text: str) -> str | None:
    names = re.findall(r"[A-Za-z_]\w*", re.sub(r"\[[^\]]*\]", " ", text))
    return names[-1] if names else None


def c_definitions(text: str) -> set[str]:
    """The functions and objects a C file defines for other files: at file scope, not `static`
    (a prototype, a type, a macro or a name inside a body is none)."""
    code = _C_ATTRIBUTE.sub(" ", _C_PREPROCESSOR.sub(" ", _c_code(text)))
    names, depth, start, in_function = set(), 0, 0, False
    for i, ch in enumerate(code):
        if ch == "{":
            head = code[start:i].strip()
            if depth == 0 and "(" in head.split("=")[0] and not head.startswith(_NOT_EXPORTED[2:]):
                in_function = True  # a function's body: the definition ends with it
                if not head.startswith("static"):
                    names.add(_last_name(head.split("(")[0]))
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and in_function:
                start, in_function = i + 1, False
        elif ch == ";" and depth == 0:
            statement = code[start:i].strip()
            start = i + 1
            declared = statement.split("=")[0]
            if statement and "(" not in declared and not statement.startswith(_NOT_EXPORTED):
                names.add(_last_name(declared))
    return names - {None}


def c_graph(root: Path = NATIVE) -> dict[str, set[str]]:
    """file -> the native files it depends on: the headers it includes and, for a C file, the C
    files whose definitions it names (a header's declarations are the interface, not a use; a
    struct member of the same name, after `->` or `.`, is no use either)."""
    files = {p.name: p.read_text() for p in sorted(root.iterdir()) if p.suffix in (".c", ".h")}
    defined_in = {name: f for f, text in files.items() if f.endswith(".c") for name in c_definitions(text)}
    graph = {}
    for f, text in files.items():
        named = {m.group(2) for m in _C_NAME.finditer(_c_code(text)) if not m.group(1)}
        uses = {defined_in[n] for n in named & set(defined_in)} if f.endswith(".c") else set()
        graph[f] = c_includes(text) | uses - {f}
    return graph


def test_native_includes_exist_and_nothing_in_native_calls_in_a_circle():
    graph = c_graph()
    missing = sorted(f"{f} includes {h}" for f, deps in graph.items() for h in deps if h not in graph)
    assert not missing, f"includes of headers that are not in native/: {missing}"
    cycles = _cycles(graph)
    assert not cycles, f"native files that call each other in a circle (move the shared part down): {cycles}"


def test_the_native_check_finds_calls_includes_and_circles(tmp_path):
    """Synthetic C: a definition is found at file scope only (not a static, a prototype, a macro, a
    type, or a name inside a body, a comment or a string); a struct member of a function's name is
    not a call of it; an include names its header; two files that call each other are a cycle."""
    _write(
        tmp_path,
        {
            "q.h": "typedef struct { int cpu_work; } Queue;\nint q_post(int t);\n",
            "q.c": """
                #include "q.h"
                #define TWICE(x) \\
                    do { x; x; } while (0)
                typedef struct { int depth; } Stats;
                static int helper(void) { return 0; }
                int q_count = 0;
                PyTypeObject QType = {.tp_name = "q"};
                __attribute__((optimize("O3"))) int q_post(int t) { /* cpu_work(t): a comment */ return t; }
                int q_wait(Queue *q) { return q->cpu_work + helper(); }
            """,
            "cpu.c": """
                #include "q.h"
                #include <stdint.h>
                int cpu_work(int t) { const char *s = "q_count"; return q_post(t); }
            """,
            "engine.c": """
                int engine_run(int t) { return cpu_work(t) + q_count; }
            """,
        },
    )
    assert c_definitions((tmp_path / "q.c").read_text()) == {"q_count", "QType", "q_post", "q_wait"}
    assert c_includes((tmp_path / "cpu.c").read_text()) == {"q.h"}
    graph = c_graph(tmp_path)
    assert graph == {"q.h": set(), "q.c": {"q.h"}, "cpu.c": {"q.h", "q.c"}, "engine.c": {"cpu.c", "q.c"}}
    assert _cycles(graph) == []
    (tmp_path / "q.c").write_text("int q_post(int t) { return cpu_work(t); }\n")  # now q.c calls back
    assert _cycles(c_graph(tmp_path)) == [["cpu.c", "q.c"]]
