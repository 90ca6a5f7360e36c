"""The reports as a browser shows them: ``charz compare`` of the recorded Zen 5 run's profile and the
recorded Zen 4 profile, and a profile report with its bottleneck section, loaded in headless
Chromium: the DOM after scripts ran (plots, tables, no error text) and a screenshot of the page.

Skipped where ``/usr/bin/chromium`` is not installed (Debian: ``apt-get install -y chromium``).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_charz import cli

CHROMIUM = Path("/usr/bin/chromium")
DATA = Path(__file__).parent / "data"
ZEN5_RUN = DATA / "runs" / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"
ZEN4_PROFILE = DATA / "profiles" / "amd-epyc-zen4-kvm-2vcpu.profile.json.gz"
ZEN4_WORKLOADS = DATA / "runs" / "amd-epyc-zen4-kvm-2vcpu-workloads.run.json.gz"
# Without the background-networking flags Chromium dials out at start, which a closed network refuses.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
WINDOW = (1200, 3000)
ERROR_TEXT = re.compile(r"Traceback|\bError\b|\bundefined\b|\bNaN\b|\bnan\b")

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no headless browser: /usr/bin/chromium is not "
                                                              "installed (Debian: apt-get install -y chromium)")


def chromium(tmp_path: Path, page: Path, *args: str) -> str:
    """Run headless Chromium on ``page`` with a fresh profile directory; its stdout."""
    profile_dir = Path(tmp_path) / f"chromium-{len(list(Path(tmp_path).glob('chromium-*')))}"
    profile_dir.mkdir()
    done = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile_dir}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def body_text(dom: str) -> str:
    """The page's text without its inline SVG and style (plot paths are not prose)."""
    dom = re.sub(r"<svg.*?</svg>", "", dom, flags=re.DOTALL)
    dom = re.sub(r"<style.*?</style>", "", dom, flags=re.DOTALL)
    return re.sub(r"<[^>]+>", " ", dom)


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("matplotlib", reason="the HTML reports draw their plots with matplotlib (extra 'report')")
    out = tmp_path_factory.mktemp("compare")
    zen4 = out / "amd-epyc-zen4-kvm-2vcpu.profile.json.gz"
    shutil.copyfile(ZEN4_PROFILE, zen4)
    assert cli.main(["profile", str(ZEN5_RUN), "-o", str(out), "--name", "amd-epyc-zen5-kvm-2vcpu.profile"]) == 0
    assert cli.main(["compare", str(out / "amd-epyc-zen5-kvm-2vcpu.profile.json"), str(zen4), "-o", str(out)]) == 0
    return out


def test_the_comparison_html_renders_its_plots_and_tables(comparison: Path, tmp_path: Path) -> None:
    dom = chromium(tmp_path, comparison / "comparison.html", "--dump-dom")
    svgs = re.findall(r"<svg.*?</svg>", dom, flags=re.DOTALL)
    assert len(svgs) == 3                                   # roofline overlay, bandwidth and latency curves
    assert all(svg.count("<path") >= 10 for svg in svgs)    # axes, ticks and one line per target
    assert dom.count("<table") == 2 and "<h2>Ceilings</h2>" in dom and "<h2>Workload classes</h2>" in dom
    assert "bandwidth:dram" in dom and "amd-epyc-zen4-kvm-2vcpu" in dom
    assert not ERROR_TEXT.search(body_text(dom))


def test_the_comparison_markdown_renders_every_table(comparison: Path, tmp_path: Path) -> None:
    markdown_it = pytest.importorskip("markdown_it", reason="Markdown is rendered with markdown-it-py")
    text = (comparison / "comparison.md").read_text(encoding="utf-8")
    page = tmp_path / "comparison.md.html"
    page.write_text("<!DOCTYPE html><html><body>" + markdown_it.MarkdownIt("commonmark").enable("table").render(text)
                    + "</body></html>", encoding="utf-8")
    dom = chromium(tmp_path, page, "--dump-dom")
    tables = len(re.findall(r"^\|(---\|)+$", text, flags=re.MULTILINE))
    assert tables == 2 and dom.count("<table") == tables
    ceilings = text.split("## Ceilings", 1)[1]
    rows = [line for line in ceilings.splitlines() if line.startswith("| ") and not line.startswith("| ceiling")]
    body = dom.split("<h2>Ceilings</h2>", 1)[1]
    assert body.count("<tr>") == len(rows) + 1               # the header row and every ceiling
    assert not ERROR_TEXT.search(body_text(dom))


def test_the_comparison_screenshot_shows_a_drawn_page(comparison: Path, tmp_path: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    shot = tmp_path / "comparison.png"
    chromium(tmp_path, comparison / "comparison.html", f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}")
    pixels = image.imread(str(shot))
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    lower_half = pixels[WINDOW[1] // 2:, :, :3]             # where the plots are: not a blank page
    assert (lower_half.min(axis=2) < 0.5).mean() > 0.005


def test_a_profile_report_with_its_bottleneck_section_renders(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the HTML reports draw their plots with matplotlib (extra 'report')")
    from pytest_charz.profile import load_profile
    from pytest_charz.report.bottleneck_command import build_document
    from pytest_charz.report.html import render_html

    document = build_document(str(ZEN4_WORKLOADS), str(ZEN4_PROFILE), "*gpt2*")
    page = tmp_path / "profile.html"
    page.write_text(render_html(load_profile(ZEN4_PROFILE), bottlenecks=document), encoding="utf-8")
    dom = chromium(tmp_path, page, "--dump-dom")
    section = dom.split("<h2>Bottlenecks</h2>", 1)[1]
    ops = len(document["cases"][0]["ops"])
    assert section.count("<table") == 2 and section.split("<h3>", 1)[1].count("<tr>") == ops + 1
    assert "<svg" in dom and not ERROR_TEXT.search(body_text(dom))
