"""The reports as a browser shows them: ``charz compare`` of the recorded Zen 5 run's profile and the
recorded Zen 4 profile, and a profile report with its bottleneck section, loaded in headless
Chromium: the DOM after scripts ran (plots, tables, no error text) and a screenshot of the page.

Skipped where ``/usr/bin/chromium`` is not installed (Debian: ``apt-get install -y chromium``).
"""
from __future__ import annotations

import json
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
    assert len(svgs) == 4                         # ratio chart, roofline overlay, bandwidth and latency curves
    assert all(svg.count("<path") >= 10 for svg in svgs)    # axes, ticks and one line per target
    from pytest_charz.report.html import FOLD_ROWS

    ceilings = len(json.loads((comparison / "comparison.json").read_text())["ceilings"])
    # the classes, the ceilings (over FOLD_ROWS: the first rows, then the whole table folded)
    assert dom.count("<table") == (3 if ceilings > FOLD_ROWS else 2)
    assert "<h2>Ceilings</h2>" in dom and "<h2>Workload classes</h2>" in dom
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
    from pytest_charz.report.html import FOLD_ROWS

    ops = len(document["cases"][0]["ops"])
    op_tables = section.split("<h3>", 1)[1]
    if ops > FOLD_ROWS:          # the longest ops, then every op folded
        assert section.count("<table") == 3 and op_tables.split("<details>", 1)[0].count("<tr>") == FOLD_ROWS + 1
        assert op_tables.split("<details>", 1)[1].count("<tr>") == ops + 1
    else:
        assert section.count("<table") == 2 and op_tables.count("<tr>") == ops + 1
    assert "<svg" in dom and not ERROR_TEXT.search(body_text(dom))


# --- pages that read top-down, measured in the browser at 1400x900 -----------------------------

SCREEN = (1400, 900)
#: Of the first screen, at least this many pixels show the first plot.
PLOT_SHOWN_PX = 300
#: Measures the page as laid out: where the first plot starts, and every box whose text runs out of
#: it (wider than the page, or its content wider than itself), written into the DOM as JSON.
LAYOUT_SCRIPT = """
(function () {
  var out = {width: window.innerWidth, page_width: document.documentElement.scrollWidth, overflow: []};
  var first = document.querySelector('svg');
  out.first_plot_top = first ? first.getBoundingClientRect().top + window.scrollY : null;
  out.plots = document.querySelectorAll('svg').length;
  var right = document.body.getBoundingClientRect().right;
  document.querySelectorAll('body *').forEach(function (el) {
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') return;
    var box = el.getBoundingClientRect();
    if (!box.width) return;
    var text = (el.textContent || '').slice(0, 80);
    if (box.right > right + 1) out.overflow.push(el.tagName + ' past the page: ' + text);
    else if (el.tagName.toLowerCase() !== 'svg' && el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0)
      out.overflow.push(el.tagName + ' wider than its box: ' + text);
  });
  var pre = document.createElement('pre'); pre.id = 'charz-layout'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""
UNIT = re.compile(r"\d\s?(Ki|Mi|Gi|Ti|k|M|G|T|P|m|u|n)?(FLOP/s|B/s|B|s|J|W)$|\dx$|\d%$")
RAW = re.compile(r"\d[eE][+-]?\d|10\^|\u00d7|\$")


def layout(tmp_path: Path, page: Path) -> dict:
    """The page's layout at a 1400x900 window, measured by :data:`LAYOUT_SCRIPT` in Chromium."""
    probe = tmp_path / f"layout-{page.name}"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", f"<script>{LAYOUT_SCRIPT}</script></body>"),
                     encoding="utf-8")
    dom = chromium(tmp_path, probe, "--dump-dom", f"--window-size={SCREEN[0]},{SCREEN[1]}")
    found = re.search(r'<pre id="charz-layout">(.*?)</pre>', dom, flags=re.DOTALL)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


def axis_ticks(svg: str) -> list[list[str]]:
    """The tick labels of every axis of one matplotlib SVG (an axis without labels is left out)."""
    axes = []
    for chunk in svg.split('<g id="matplotlib.axis_')[1:]:
        labels = []
        for tick in re.split(r'<g id="[xy]tick_\d+">', chunk)[1:]:
            text = re.search(r"<text[^>]*>([^<]*)</text>", tick)
            if text and text.group(1).strip():
                labels.append(text.group(1).strip())
        if labels:
            axes.append(labels)
    return axes


def assert_humanized(page: Path) -> int:
    """Every numeric axis of every plot of ``page`` has units on its ticks (GB/s, KiB, us, x, %)
    or plain numbers of at most four digits, never a raw exponent; how many axes carry units."""
    with_units = 0
    for svg in re.findall(r"<svg.*?</svg>", page.read_text(encoding="utf-8"), flags=re.DOTALL):
        for labels in axis_ticks(svg):
            numeric = [label for label in labels if re.match(r"[-\u2212]?\d", label)]
            assert not [label for label in labels if RAW.search(label)], labels
            if not numeric:
                continue                                     # a categorical axis: ceiling or parameter names
            if all(UNIT.search(label) for label in numeric):
                with_units += 1
            else:
                assert all(re.fullmatch(r"[-\u2212]?\d{1,4}(\.\d+)?", label) for label in numeric), labels
    return with_units


@pytest.fixture(scope="module")
def pages(comparison: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The profile, comparison, validation and sweep pages, built from the recorded runs."""
    from pytest_charz.report.validation import render_html as validation_html
    from pytest_charz.run import load_run
    from pytest_charz.validation.models import validate

    out = tmp_path_factory.mktemp("pages")
    report = validate([load_run(str(ZEN5_RUN))], models=["composite", "spec-roofline"]).to_json()
    (out / "validation.html").write_text(validation_html(report), encoding="utf-8")
    assert cli.main(["sweep", "llama-2-7b", "--phase", "decode", "--context", "256", "--num-layers", "2",
                     "--target", "h100-sxm", "-o", str(out / "sweep"), "--no-progress",
                     "--vary", "memory_bandwidth=2e12:4e12:6", "--vary", "compute_units=66:132:3"]) == 0
    return {"profile": comparison / "amd-epyc-zen5-kvm-2vcpu.profile.html", "compare": comparison / "comparison.html",
            "validation": out / "validation.html", "sweep": out / "sweep" / "sweep.html"}


@pytest.mark.parametrize("name", ["profile", "compare", "validation", "sweep"])
def test_the_first_plot_is_on_the_first_screen_and_no_text_overflows(pages: dict[str, Path], tmp_path: Path,
                                                                      name: str) -> None:
    measured = layout(tmp_path, pages[name])
    assert measured["width"] == SCREEN[0] and measured["plots"] >= 2
    assert measured["first_plot_top"] is not None and measured["first_plot_top"] <= SCREEN[1] - PLOT_SHOWN_PX
    assert measured["page_width"] <= SCREEN[0], "the page scrolls sideways"
    assert measured["overflow"] == []


@pytest.mark.parametrize("name", ["profile", "compare", "validation", "sweep"])
def test_every_axis_shows_human_units(pages: dict[str, Path], name: str) -> None:
    assert assert_humanized(pages[name]) >= 2


def test_the_profile_page_puts_plots_before_details_and_says_each_caveat_once(pages: dict[str, Path]) -> None:
    text = pages["profile"].read_text(encoding="utf-8")
    assert text.index("<svg") < text.index("<h2>Bottom line</h2>") < text.index("<h2>Ceilings</h2>")
    caveats = text.split("<h2>Caveats", 1)[1].split("</ol>", 1)[0]
    items = re.findall(r'<li class="caveat">(.*?)</li>', caveats)
    bare = [re.sub(r'<span class="count">\d+x</span> |<i>.*?</i>', "", item).strip() for item in items]
    assert len(bare) == len(set(bare)) and '<span class="count">' in caveats   # once each, with its count
    roofline = re.findall(r"<svg.*?</svg>", text, flags=re.DOTALL)[0]
    for level in ("L1", "L2", "L3", "DRAM"):                  # a roof per memory level the run measured
        assert f"{level} roof: " in roofline


def test_the_validation_page_folds_its_long_tables(pages: dict[str, Path]) -> None:
    text = pages["validation"].read_text(encoding="utf-8")
    assert text.index("<svg") < text.index("<table") and "<details>" in text
    shown = text.split("<details>", 1)[0]
    assert max(len(re.findall(r"<tr>", table)) for table in shown.split("</table>")) <= 26
