"""``charz compare RUN_A RUN_B``: run files case by case, built on the recorded Zen 5 and Zen 3 runs.

The slowdowns are synthetic: a copy of a recorded run whose samples of chosen cases are scaled, so
the true ratio of each case is known (1 where nothing was scaled). Only a slice of each recorded
run is used, so every comparison takes a fraction of a second.
"""
from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

from pytest_charz import cli
from pytest_charz.report.runs_compare import (
    RUN_COMPARISON,
    compare_cases,
    find_cases,
    histogram,
    slowed_beyond,
    sort_cases,
)

RUNS = Path(__file__).parent / "data" / "runs"
ZEN5 = RUNS / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"
ZEN3 = RUNS / "amd-epyc-zen3-kvm-2vcpu.run.json.gz"
MEMCPY_1MIB = "suites/test_movement.py::test_memcpy_cpu[1MiB]"
MEMCPY_4MIB = "suites/test_movement.py::test_memcpy_cpu[4MiB]"
FMA = "suites/test_compute.py::test_fma_cpu[fp64-threads2]"


def recorded(path: Path, keep: Callable[[Mapping[str, Any]], bool] = lambda case: True) -> dict[str, Any]:
    """A recorded run file's JSON with only the cases ``keep`` accepts."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    document["cases"] = [case for case in document["cases"] if keep(case)]
    return document


def scaled(document: Mapping[str, Any], factors: Mapping[str, float], *, created: str | None = None,
           commit: str | None = None) -> dict[str, Any]:
    """A copy of a run's JSON whose cases named in ``factors`` have every sample (and the median,
    CI and IQR) multiplied by their factor: a synthetic slowdown (> 1) or speed-up (< 1)."""
    out = copy.deepcopy(dict(document))
    if created is not None:
        out["created"] = created
    if commit is not None:
        out["provenance"]["suite_git"]["commit"] = commit
    for case in out["cases"]:
        factor = factors.get(case["id"])
        if factor is None:
            continue
        m = case["measurement"]
        m["samples_s"] = [v * factor for v in m["samples_s"]]
        m["median_s"] *= factor
        for key in ("ci_s", "iqr_s"):
            if m.get(key):
                m[key] = [v * factor for v in m[key]]
    return out


def write(path: Path, document: Mapping[str, Any]) -> str:
    path.write_text(json.dumps(document))
    return str(path)


def movement_and_compute(case: Mapping[str, Any]) -> bool:
    return "test_memcpy_cpu" in case["id"] or "test_fma_cpu" in case["id"]


@pytest.fixture(scope="module")
def zen5() -> dict[str, Any]:
    return recorded(ZEN5, movement_and_compute)


@pytest.fixture
def pair(tmp_path: Path, zen5: dict[str, Any]) -> tuple[str, str]:
    """The recorded Zen 5 slice, and the same run with memcpy 1 MiB 10% slower and 4 MiB 20% faster."""
    after = scaled(zen5, {MEMCPY_1MIB: 1.10, MEMCPY_4MIB: 0.80}, created="2026-12-02T10:00:00+00:00", commit="b" * 40)
    return write(tmp_path / "before.run.json", zen5), write(tmp_path / "after.run.json", after)


def rows(out: str) -> dict[str, str]:
    """The table rows of the text output by the case column's text."""
    return {line.split()[0]: line for line in out.splitlines() if line.startswith("test_")}


def test_ratios_with_intervals_case_by_case(pair: tuple[str, str], capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["compare", *pair]) == 0
    out = capsys.readouterr().out
    table = rows(out)
    slowed, faster = table["test_movement.py::test_memcpy_cpu[1MiB]"], table["test_movement.py::test_memcpy_cpu[4MiB]"]
    ratio, low, high = (float(x) for x in re.search(r"([\d.]+)x \[([\d.]+), ([\d.]+)\]", slowed).groups())
    assert ratio == pytest.approx(1.10, rel=1e-6) and low <= 1.10 <= high and "slower" in slowed
    assert "0.8x [" in faster and "faster" in faster
    untouched = table["test_compute.py::test_fma_cpu[fp64-threads2]"]
    # the same samples on both sides: a ratio of 1, an interval around it as wide as their noise
    ratio, low, high = (float(x) for x in re.search(r"([\d.]+)x \[([\d.]+), ([\d.]+)\]", untouched).groups())
    assert ratio == 1 and 0.99 < low < 1 < high < 1.01 and "same" in untouched
    # the most slowed case comes first (--sort ratio), the verdicts of both runs are shown
    first = next(line for line in out.splitlines() if line.startswith("test_"))
    assert first.startswith("test_movement.py::test_memcpy_cpu[1MiB]") and "new/new" in first
    assert "B vs A: " in out and "1 slower, 1 faster" in out


def test_fail_over_exits_non_zero_only_beyond_the_limit(pair: tuple[str, str], capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    assert cli.main(["compare", *pair, "--fail-over", "5"]) == 1
    err = capsys.readouterr().err
    assert "1 case(s) slowed beyond 5%" in err and MEMCPY_1MIB in err and MEMCPY_4MIB not in err
    # a 10% slowdown is not beyond 15%; a speed-up never fails
    assert cli.main(["compare", *pair, "--fail-over", "15"]) == 0
    assert "slowed beyond" not in capsys.readouterr().err
    assert cli.main(["compare", *pair, "--fail-over", "-3"]) == 2


def test_the_fail_over_rule_needs_the_whole_interval_beyond_the_limit() -> None:
    def comparison(ratio: float, interval: list[float] | None) -> dict[str, Any]:
        return {"runs": [{"label": "a"}, {"label": "b"}],
                "cases": [{"id": "x", "ratios": [{"ratio": ratio, "interval": interval}]}]}

    assert slowed_beyond(comparison(1.08, [1.06, 1.10]), 5) == [
        {"id": "x", "run": "b", "ratio": 1.08, "interval": [1.06, 1.10]}]
    assert slowed_beyond(comparison(1.08, [1.04, 1.12]), 5) == []     # the interval reaches below 5%
    assert slowed_beyond(comparison(1.30, None), 5) == []             # no interval: never a failure


def _case(samples: list[float], mode: str = "hot") -> Any:
    import statistics

    from charz_factories import make_case, measurement_json

    median = statistics.median(samples)
    return make_case("c", {"flops": {"fp64": 1.0}}, median,
                     measurement=measurement_json(median, samples_s=samples, mode=mode))


def test_change_of_a_case_from_its_samples() -> None:
    import numpy as np

    rng = np.random.default_rng(3)
    base = list(1e-3 * (1 + 0.01 * rng.standard_normal(60)))
    noisy = list(1e-3 * (1 + 0.2 * rng.standard_normal(60)))
    assert compare_cases(_case(base), _case(base), 0.05)["change"] == "same"
    assert compare_cases(_case(base), _case([v * 1.2 for v in base]), 0.05)["change"] == "slower"
    assert compare_cases(_case(base), _case([v * 0.8 for v in base]), 0.05)["change"] == "faster"
    assert compare_cases(_case(base), _case([v * 1.05 for v in noisy]), 0.05)["change"] == "undecided"
    few = compare_cases(_case(base), _case(base[:4]), 0.05)
    assert few["change"] == "unknown" and few["interval"] is None and few["ratio"] is not None
    assert compare_cases(_case(base), _case(base, mode="cold"), 0.05)["change"] == "incomparable"


def test_sort_columns_group_and_width(pair: tuple[str, str], capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "72")
    assert cli.main(["compare", *pair, "--sort", "name", "--group-by", "suite", "--columns", "case,ratio,p"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 72 for line in out.splitlines()), max(out.splitlines(), key=len)
    assert "suite: suites/test_compute.py" in out and "suite: suites/test_movement.py" in out
    assert "A median" not in out and "B/A [95% CI]" in out and " p" in out
    names = [line.split()[0] for line in out.splitlines() if line.startswith("test_")]
    assert names[names.index("test_memcpy_cpu[16KiB]") + 1] == "test_memcpy_cpu[16MiB]"   # by name
    assert cli.main(["compare", *pair, "--columns", "case,speed"]) == 2
    assert "--columns takes" in capsys.readouterr().err


def test_markdown_and_json_on_stdout_and_files_with_out_dir(pair: tuple[str, str], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", *pair, "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("# Run comparison: before vs after") and "| test_movement.py::test_memcpy_cpu[1MiB] |" in markdown
    assert cli.main(["compare", *pair, "--format", "json"]) == 0
    document = RUN_COMPARISON.check(json.loads(capsys.readouterr().out), "stdout")
    case = next(c for c in document["cases"] if c["id"] == MEMCPY_1MIB)
    assert case["ratios"][0]["change"] == "slower" and case["runs"][1]["median_s"] > case["runs"][0]["median_s"]
    assert not list(tmp_path.glob("*comparison*"))          # nothing is written without -o or --name
    pytest.importorskip("matplotlib")
    assert cli.main(["compare", *pair, "-o", str(tmp_path / "out"), "--histogram", "memcpy_cpu[1MiB]"]) == 0
    page = (tmp_path / "out" / "run-comparison.html").read_text()
    assert page.index("<svg") < page.index("<table") and "Largest changes" in page
    assert page.count("<svg") == 2 and f"Samples of {MEMCPY_1MIB}" in page
    assert 'src="http' not in page and "<script" not in page and "<link" not in page
    assert RUN_COMPARISON.load(tmp_path / "out" / "run-comparison.json")["runs"][1]["commit"] == "b" * 40


def test_histogram_of_a_case(pair: tuple[str, str], zen5: dict[str, Any], capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(["compare", *pair, "--histogram", "*memcpy_cpu[1MiB]"]) == 0
    out = capsys.readouterr().out
    block = out[out.index(f"histogram of {MEMCPY_1MIB}"):]
    kept = len(next(c for c in zen5["cases"] if c["id"] == MEMCPY_1MIB)["measurement"]["samples_s"])
    assert f"A (n={kept})" in block and f"B (n={kept})" in block and "█" in block
    counts = [re.findall(r" (\d+) ", line + " ") for line in block.splitlines()[2:18]]
    outside = sum(int(n) for n in re.findall(r"(\d+) (?:below|above)", block))
    assert sum(int(c[0]) + int(c[1]) for c in counts) + outside == 2 * kept
    assert cli.main(["compare", *pair, "--histogram", "memcpy"]) == 2
    assert "names" in capsys.readouterr().err


def test_histogram_counts_every_sample_once() -> None:
    samples = [[1.0, 1.1, 1.2, 1.3, 5.0], [0.01, 1.15, 1.25]]
    counted = histogram(samples, bins=4)
    for run, values in enumerate(samples):
        assert sum(counted["counts"][run]) + counted["below"][run] + counted["above"][run] == len(values)
    assert len(counted["edges_s"]) == 5 and counted["edges_s"][0] < counted["edges_s"][-1]
    assert histogram([[2.0, 2.0]], bins=3)["counts"] == [[0, 2, 0]]


def test_recorded_runs_of_two_cpus_say_so_first(tmp_path: Path, zen5: dict[str, Any],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    zen3 = recorded(ZEN3, movement_and_compute)
    paths = write(tmp_path / "zen5.json", zen5), write(tmp_path / "zen3.json", zen3)
    assert cli.main(["compare", *paths, "--sort", "change"]) == 0
    out = capsys.readouterr().out
    assert "caveat: zen3 is of another target or CPU" in out
    assert out.index("caveat:") < out.index("B/A [95% CI]")
    shared = {c["id"] for c in zen5["cases"]} & {c["id"] for c in zen3["cases"]}
    assert f"{len(shared)} cases in both" in out


def test_sorting_finding_and_refusals(pair: tuple[str, str], capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    cases = [{"id": i, "runs": [{"median_s": m}], "ratios": [{"ratio": r, "p_value": p, "change": ch}]}
             for i, m, r, p, ch in (("a", 1.0, 1.5, 0.5, "undecided"), ("b", 3.0, 0.7, 0.001, "faster"),
                                     ("c", 2.0, 1.2, 0.01, "slower"))]
    assert [c["id"] for c in sort_cases(cases, "ratio")] == ["a", "c", "b"]
    assert [c["id"] for c in sort_cases(cases, "change")] == ["c", "a", "b"]
    assert [c["id"] for c in sort_cases(cases, "median")] == ["b", "c", "a"]
    assert [c["id"] for c in sort_cases(cases, "p")] == ["b", "c", "a"]
    assert find_cases(["x::a[1]", "x::a[2]", "y::b"], "y::b") == ["y::b"]
    assert find_cases(["x::a[1]", "x::a[2]", "y::b"], "x::a*") == ["x::a[1]", "x::a[2]"]
    assert find_cases(["x::a[1]", "y::b"], "b") == ["y::b"]
    # one run is no comparison; a run and a profile are not compared with each other
    assert cli.main(["compare", pair[0]]) == 2
    profile = tmp_path / "p.profile.json"
    profile.write_text(json.dumps({"kind": "charz-profile", "version": 1}))
    assert cli.main(["compare", pair[0], str(profile)]) == 2
    assert "not both" in capsys.readouterr().err


def test_three_runs_each_against_the_first(tmp_path: Path, zen5: dict[str, Any], capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")
    paths = [write(tmp_path / "a.json", zen5),
             write(tmp_path / "b.json", scaled(zen5, {}, commit="b" * 40)),
             write(tmp_path / "c.json", scaled(zen5, {FMA: 1.5}, commit="c" * 40))]
    assert cli.main(["compare", *paths, "--columns", "case,ratio,change", "--fail-over", "20"]) == 1
    captured = capsys.readouterr()
    assert "B/A [95% CI]" in captured.out and "C/A [95% CI]" in captured.out
    assert "B change" in captured.out and "C change" in captured.out
    assert "C vs A: " in captured.out and "1 slower" in captured.out
    line = rows(captured.out)["test_compute.py::test_fma_cpu[fp64-threads2]"]
    assert line.split()[-2:] == ["same", "slower"]
    assert f"{FMA}: c 1.500x [" in captured.err


def test_html_says_first_that_the_cpus_differ(tmp_path: Path, zen5: dict[str, Any],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from pytest_charz.report import runs_compare_report

    monkeypatch.setattr(runs_compare_report, "SHOWN_ROWS", 5)
    zen3 = recorded(ZEN3, movement_and_compute)
    paths = write(tmp_path / "zen5.json", zen5), write(tmp_path / "zen3.json", zen3)
    assert cli.main(["compare", *paths, "--name", "ab"]) == 0
    page = (tmp_path / "ab.html").read_text()
    assert page.index("another target or CPU") < page.index("<svg") < page.index("<table")
    # the first rows shown, the whole table of the cases folded after them
    cases = len({c["id"] for c in zen5["cases"]} | {c["id"] for c in zen3["cases"]})
    assert page.count("<details>") == 1 and f"All {cases} cases ({cases - 5} more)" in page


def test_the_pages_read_top_down_in_a_browser(pair: tuple[str, str], tmp_path: Path) -> None:
    """The run comparison and the history page at 1400x900 in headless Chromium: the first plot on
    the first screen, no text past its box, units on every numeric axis."""
    pytest.importorskip("matplotlib")
    from test_report_browser import CHROMIUM, PLOT_SHOWN_PX, SCREEN, assert_humanized, layout

    if not CHROMIUM.exists():
        pytest.skip("no headless browser: /usr/bin/chromium is not installed")
    third = scaled(json.loads(Path(pair[1]).read_text()), {FMA: 1.4}, created="2026-12-03T10:00:00+00:00",
                   commit="c" * 40)
    runs = [*pair, write(tmp_path / "third.run.json", third)]
    assert cli.main(["compare", *runs, "-o", str(tmp_path), "--histogram", MEMCPY_1MIB]) == 0
    assert cli.main(["history", *runs, "-o", str(tmp_path)]) == 0
    for page in (tmp_path / "run-comparison.html", tmp_path / "history.html"):
        measured = layout(tmp_path, page)
        assert measured["first_plot_top"] is not None and measured["first_plot_top"] < SCREEN[1] - PLOT_SHOWN_PX
        assert measured["overflow"] == [] and measured["page_width"] <= SCREEN[0]
        assert assert_humanized(page) >= 1
