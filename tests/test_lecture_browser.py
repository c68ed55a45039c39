"""The lecture page in a real browser: headless Chromium renders every section and every image.

A --quick page of two sections is made with the real CLI; Chromium then loads a copy with a
small probe script appended (the page itself has none) that records, once everything has
loaded, each section and each image's `complete` and `naturalWidth`, plus any error event, into
the DOM; `--dump-dom` hands that back. Chromium logs every console message to stderr with
`--enable-logging=stderr`: there must be none. A screenshot is saved beside the page.

Skips only when Chromium is missing and PLAYGROUND_REQUIRE_TOOLS is unset (CI sets it). With
PLAYGROUND_ARTIFACTS=DIR the screenshot and the page are also copied to DIR.
"""

import html
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from tools import chromium, run_chromium

from playground.cli.testing import run_cli

SECTIONS = "4,5"  # a real-run image of each kind: the scenarios' own plots and the lecture's added ones

PROBE = """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(
  (e.target && e.target.tagName ? e.target.tagName + " " + (e.target.id || "") : "") + " " + (e.message || "")), true);
window.addEventListener("load", () => {
  const report = {
    sections: [...document.querySelectorAll("section")].map(s => [s.id, s.querySelector("h2").textContent,
      s.getBoundingClientRect().height]),
    images: [...document.images].map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight]),
    errors: window.__errors,
  };
  const out = document.createElement("pre");
  out.id = "probe-report";
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
});
</script>"""


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_lecture_page_renders_every_section_and_image_in_chromium(tmp_path):
    exe = chromium()
    proc = run_cli(
        ["lecture", "--quick", "--sections", SECTIONS, "--out", str(tmp_path / "runs")], timeout_s=110
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lecture_dir = (tmp_path / "runs" / "latest").resolve()
    page = lecture_dir / "index.html"
    text = page.read_text()
    assert "<script" not in text

    probed = tmp_path / "probed.html"
    probed.write_text(text.replace("</body>", PROBE + "</body>"))
    dom = run_chromium(
        exe, tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="probe-report">(.*?)</pre>', dom.stdout, re.S)
    assert found, "the page did not finish loading"
    report = json.loads(html.unescape(found.group(1)))

    want = [f"s{n}" for n in SECTIONS.split(",")]
    assert [s[0] for s in report["sections"]] == want
    assert all(height > 100 for _, _, height in report["sections"]), report["sections"]
    expected_images = text.count("<img ")
    assert len(report["images"]) == expected_images >= 6
    broken = [i for i in report["images"] if not (i[1] and i[2] > 0 and i[3] > 0)]
    assert not broken, f"images that did not render: {broken}"
    assert report["errors"] == []
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln]
    assert console == [], f"console messages: {console}"

    shot = lecture_dir / "screenshot.png"
    snap = run_chromium(
        exe, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()
    )
    assert snap.returncode == 0, snap.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    keep = os.environ.get("PLAYGROUND_ARTIFACTS")  # pytest's tmp directories are rotated; keep a copy
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "lecture-screenshot.png")
        shutil.copy(page, Path(keep) / "lecture-index.html")
    print(f"screenshot: {shot}")
