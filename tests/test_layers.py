"""The layers of `playground/` point one way: a module imports only from its own layer or below,
a lab never imports another lab, and no modules import each other in a circle.

The order is the picture in docs/architecture.md; this test reads the picture too, so the page and
the rule cannot drift apart. Every import counts, also one inside a function.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "playground"

# Bottom to top: (layer, the top-level modules or packages of playground/ in it).
LAYERS = [
    (
        "basics",
        "errors sizes trace clocks interrupts scratch fingerprint machine topology report plot params "
        "timeline rundir environment notebook native",
    ),
    ("comm", "comm"),
    ("models", "models transformer"),
    ("collectives", "collectives"),
    ("sim", "sim"),
    ("config", "scenario"),
    ("rendezvous", "rendezvous coordinator control_messages"),
    ("hosts", "hosts"),
    ("launcher", "worker launch run external procs"),
    ("labs", "buckets concurrency kvcache memlab network queueing baselines training"),
    (
        "top",
        "bench benchtable copybw inspect diagram hotpath lecture results reference testing api cli __main__ __init__ netns_rsh",
    ),
]
LAB_LAYER = "labs"


def _unit(module: str) -> str:
    """The top-level name under playground/ that a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the playground modules it imports (the deepest existing module named)."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in mods.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{a.name}" for a in node.names}
        graph[name] = {r for t in targets if t.startswith("playground") and (r := resolve(t)) and r != name}
    return graph


def _layer_of() -> dict[str, tuple[int, str]]:
    return {unit: (i, layer) for i, (layer, units) in enumerate(LAYERS) for unit in units.split()}


def test_every_module_has_a_layer():
    layer_of = _layer_of()
    missing = sorted({_unit(m) for m in _modules()} - set(layer_of))
    assert not missing, f"put these in a layer of LAYERS (and docs/architecture.md): {missing}"


def _violations(graph: dict[str, set[str]], layer_of: dict[str, tuple[int, str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        (i, layer), unit = layer_of[_unit(module)], _unit(module)
        for target in targets:
            (j, other), other_unit = layer_of[_unit(target)], _unit(target)
            if j > i:
                wrong.append(f"{module} ({layer}) imports {target} ({other}), a layer above it")
            elif layer == other == LAB_LAYER and unit != other_unit:
                wrong.append(f"{module} imports {target}: one lab from another (move the shared part down)")
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
    """docs/architecture.md's layer picture: one line per layer, top first, `name  members`."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"<!-- layers -->\n```text\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```text block after <!-- layers -->"
    drawn = [line.split(None, 1) for line in block.group(1).splitlines() if line.strip()]
    assert [(name, set(members.replace(",", " ").replace("/", " ").split())) for name, members in drawn] == [
        (layer, set(units.split())) for layer, units in reversed(LAYERS)
    ]


def test_the_checks_catch_what_they_should():
    """An upward import, one lab importing another, and a circle are each found."""
    graph = {
        "playground.comm.local": {"playground.rendezvous"},  # comm imports from a layer above
        "playground.kvcache.contiguous": {"playground.memlab.allocation"},  # a lab imports a lab
        "playground.sim.engine": {"playground.sim.transport"},  # a circle inside one layer
        "playground.sim.transport": {"playground.sim.engine", "playground.errors"},  # and a legal import
    }
    assert _violations(graph, _layer_of()) == [
        "playground.comm.local (comm) imports playground.rendezvous (rendezvous), a layer above it",
        "playground.kvcache.contiguous imports playground.memlab.allocation: one lab from another "
        "(move the shared part down)",
    ]
    assert _cycles(graph) == [["playground.sim.engine", "playground.sim.transport"]]
