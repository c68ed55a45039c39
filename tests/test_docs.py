"""The docs cannot drift from the code: every `python -m playground ...` command shown in README.md
and docs/ parses with the real parser (a stale flag fails), names a scenario that exists, the
reference pages build from the code, and the site builds strictly."""

import html
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tools import chromium, importable, need, run_chromium

from playground.cli import _attach_signed_values, build_parser
from playground.cli.reference import PAGES, builtin_scenarios, undocumented_fields
from playground.config.scenario import Fault, Scenario, builtin_names
from playground.core.topology import Link

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_STOP = re.compile(r"\s(?:#|\|(?=\s)|&&?|;|2?>|\)|\\$)|[`'\"]$")


def commands(text: str) -> list[str]:
    """Every `python -m playground ARGS` in a page, continuation lines joined, shell tails cut."""
    text = re.sub(r"\\\n\s*", " ", text)
    out = []
    for m in re.finditer(r"python -m playground ([^`\n]*)", text):
        rest = m.group(1)
        stop = _STOP.search(rest)
        out.append(" ".join((rest[: stop.start()] if stop else rest).split()))
    return [c for c in out if c]


def is_synopsis(args: list[str]) -> bool:
    """A usage line with placeholders (`run NAME [--ranks N]`, `--transport ipc|tcp`), not a command."""
    return any(
        a.startswith("[") or a.endswith("]") and "=" not in a or "|" in a or a == "..." or a.isupper()
        for a in args
    )


def stale_flags(args: list[str], subs) -> list[str]:
    """The flags of `args` that its subcommand's parser does not have, exactly as written (a
    sub-command's, such as `bench allreduce`'s, where one is named)."""
    parser, rest = subs[args[0]], args[1:]
    nested = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    if nested and rest and rest[0] in nested[0].choices:
        parser, rest = nested[0].choices[rest[0]], rest[1:]
    known = {s for a in parser._actions for s in a.option_strings}
    return [a.split("=")[0] for a in rest if a.startswith("-") and a.split("=")[0] not in known]


def _subparsers():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return parser, sub.choices


def _cases():
    cases = []
    for path in DOC_FILES:
        for cmd in commands(path.read_text()):
            cases.append(pytest.param(cmd, id=f"{path.relative_to(ROOT)}: {cmd[:60]}"))
    return cases


CASES = _cases()


def test_the_pages_show_commands():
    assert len(CASES) > 60  # the README alone shows a dozen


@pytest.mark.parametrize("cmd", CASES)
def test_every_command_shown_parses(cmd):
    parser, subs = _subparsers()
    args = shlex.split(cmd)
    assert args[0] in subs, f"{cmd}: no subcommand {args[0]!r}; there are {', '.join(subs)}"
    stale = stale_flags(args, subs)  # argparse would take `--rank` for `--ranks`: the page must not
    assert not stale, f"{cmd}: {args[0]} has no {stale}"
    if is_synopsis(args) or len(args) == 1:  # a usage line, or the subcommand named in a sentence
        return
    try:
        ns = parser.parse_args(_attach_signed_values(args))
    except SystemExit:
        pytest.fail(f"does not parse: python -m playground {cmd}")
    scenario = getattr(ns, "scenario", None)
    if ns.command in ("run", "node") and scenario and "/" not in scenario and not scenario.endswith(".yaml"):
        assert scenario in builtin_names(), f"{cmd}: no built-in scenario {scenario!r}"


def test_the_command_finder_sees_through_shell():
    page = (
        "```bash\nsudo python -m playground run ring --ranks 8 \\\n    --hosts 4  # four hosts\n```\n"
        "`python -m playground inspect runs/latest` and python -m playground bench p2p | tee x\n"
    )
    assert commands(page) == ["run ring --ranks 8 --hosts 4", "inspect runs/latest", "bench p2p"]
    assert is_synopsis(shlex.split("run NAME [--ranks N]")) and not is_synopsis(
        ["run", "ring", "--set", "a=[1]"]
    )


def test_a_stale_flag_is_caught():
    """Even one argparse would accept as an abbreviation of a real flag."""
    _, subs = _subparsers()
    assert stale_flags(["run", "ring", "--rank", "8", "--hosts=2"], subs) == ["--rank"]
    assert stale_flags(["bench", "allreduce", "--ranks", "2"], subs) == []
    assert stale_flags(["bench", "table", "--ranks", "2"], subs) == ["--ranks"]  # table has none


def test_the_reference_pages_build_from_the_code():
    pages = {path: make() for path, make in PAGES.items()}
    assert "## `bench`" in pages["reference/cli.md"] and "`--baseline`" in pages["reference/cli.md"]
    for name in builtin_names():
        assert f"`{name}`" in pages["reference/scenarios.md"], name
    assert (
        "`params.bucket_cap_mb`" in pages["reference/scenarios.md"]
        or "`params.bucket_mb`" in pages["reference/scenarios.md"]
    )
    assert "| allreduce | `ring` |" in pages["reference/registries.md"]
    assert "`PLAYGROUND_SHM_MIN_BYTES`" in pages["reference/environment.md"]


def test_every_scenario_key_has_a_line_of_doc():
    """The scenario reference shows each key's comment from the code: every key must have one."""
    missing = {}
    for name, _, params_cls, _ in builtin_scenarios():
        if params_cls is not None:
            missing.update(
                {f"{name}: {key}": params_cls.__module__ for key in undocumented_fields(params_cls)}
            )
    assert not missing, f"write a comment beside these fields: {sorted(missing)}"


def test_every_key_of_a_scenario_file_has_a_line_of_doc():
    for cls in (Scenario, Fault, Link):
        assert not undocumented_fields(cls), f"write a comment beside these fields of {cls.__name__}"


@pytest.mark.timeout(120)
def test_the_site_builds_strictly(tmp_path):
    # it runs as this interpreter's module: an mkdocs of another environment on PATH is not it
    need(importable("mkdocs"), "the docs toolchain is not installed (pip install '.[docs]')")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "reference" / "scenarios" / "index.html").exists()


FIT_PROBE = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const clipped = [...document.querySelectorAll(".md-typeset__scrollwrap")]
    .filter(w => w.scrollWidth > w.clientWidth + 1)
    .map(w => w.querySelector("tr").textContent.trim().replace(/\\s+/g, " ").slice(0, 80));
  const code = [...document.querySelectorAll(".md-typeset pre > code")]
    .filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => c.textContent.trim().split("\\n")[0].slice(0, 80));
  const out = document.createElement("pre");
  out.id = "fit-report";
  out.textContent = JSON.stringify({tables: document.querySelectorAll(".md-typeset table").length, clipped, code});
  document.body.appendChild(out);
}, 0));
</script>"""
WIDE_PAGES = ["", "getting-started", "parallelism", "results/collectives", "results/labs", "results/serving"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_result_tables_and_code_blocks_fit_a_1400px_window(tmp_path):
    """In a 1400 px window nothing hides behind a scrollbar on the pages a newcomer reads first and
    on the results pages with the widest tables: code wraps its long lines (docs/stylesheets),
    result tables fit the page or come in parts (results.PAGE_COLUMNS)."""
    exe = chromium()
    need(importable("mkdocs"), "the docs toolchain is not installed (pip install '.[docs]')")
    site = tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(site)], cwd=ROOT,
                           capture_output=True, text=True, timeout=150)  # fmt: skip
    assert build.returncode == 0, build.stderr
    for path in WIDE_PAGES:
        page = site / path / "index.html"
        probed = page.with_name("fit-probed.html")  # beside it: the page's relative links still resolve
        probed.write_text(page.read_text().replace("</body>", FIT_PROBE + "</body>"))
        dom = run_chromium(exe, tmp_path / "profile", "--window-size=1400,900", "--virtual-time-budget=5000",
                           "--dump-dom", probed.as_uri())  # fmt: skip
        found = re.search(r'<pre id="fit-report">(.*?)</pre>', dom.stdout, re.S)
        assert found, f"{path or 'index'}: the page did not finish loading\n{dom.stderr[-2000:]}"
        report = json.loads(html.unescape(found.group(1)))
        assert report["clipped"] == [], f"{path}: tables behind a scrollbar: {report['clipped']}"
        assert report["code"] == [], f"{path}: code lines cut at the right: {report['code']}"
    assert report["tables"] > 0
