"""``charz history``: the step rule on hand-made series, and the command on recorded runs (three
recorded CPUs, and copies of the Zen 5 run with a synthetic slowdown) and on a baseline store."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_charz import cli
from pytest_charz.report.history import HISTORY, best_split, detect_steps, sparkline
from test_compare_runs import RUNS, ZEN3, ZEN5, recorded, scaled, write

ZEN4 = RUNS / "amd-epyc-zen4-kvm-2vcpu-workloads.run.json.gz"
MEMCPY_1MIB = "suites/test_movement.py::test_memcpy_cpu[1MiB]"


def ci(median: float, halfwidth: float = 0.005) -> tuple[float, float]:
    return median * (1 - halfwidth), median * (1 + halfwidth)


def test_a_slowdown_in_the_last_of_three_runs_is_a_step() -> None:
    medians = [1.0, 1.004, 1.3]
    steps = detect_steps(medians, [ci(m) for m in medians])
    assert len(steps) == 1 and steps[0].index == 2
    # levels are medians of ln(median): of two points, their geometric mean
    assert steps[0].before == pytest.approx(math.sqrt(1.004)) and steps[0].ratio == pytest.approx(1.3 / math.sqrt(1.004))


def test_what_is_not_a_step() -> None:
    flat = [1.0, 1.01, 0.99, 1.0, 1.02, 0.995]
    assert detect_steps(flat, [ci(m) for m in flat]) == []
    # below the threshold, however clear
    assert detect_steps([1.0, 1.0, 1.03, 1.03], [ci(m, 0.001) for m in (1.0, 1.0, 1.03, 1.03)]) == []
    # beyond the threshold but inside the runs' own intervals (each +-10%)
    wide = [1.0, 1.0, 1.08, 1.08]
    assert detect_steps(wide, [ci(m, 0.10) for m in wide]) == []
    # beyond the threshold but no more than the scatter between runs
    scatter = [1.0, 1.25, 0.9, 1.2, 0.95, 1.3, 1.0, 1.22]
    assert detect_steps(scatter) == []
    assert detect_steps([2.0]) == [] and detect_steps([]) == []


def test_up_then_down_is_two_steps_and_each_knows_its_levels() -> None:
    medians = [1.0, 1.0, 1.0, 1.5, 1.5, 1.5, 1.0, 1.0]
    steps = detect_steps(medians, [ci(m) for m in medians])
    assert [s.index for s in steps] == [3, 6]
    assert [round(s.ratio, 3) for s in steps] == [1.5, round(1 / 1.5, 3)]


def test_step_without_intervals_uses_the_scatter() -> None:
    # a store's changes: medians only; a change of reference is a step, equal sessions are not
    assert [s.index for s in detect_steps([7.84e-6, 7.84e-6, 7.84e-6, 5.34e-6])] == [3]
    assert detect_steps([1.0, 1.0, 1.0]) == []


def test_split_and_arguments() -> None:
    assert best_split([1, 1, 5, 5, 5]) == 2 and best_split([3]) is None
    with pytest.raises(ValueError):
        detect_steps([1.0, -1.0])
    with pytest.raises(ValueError):
        detect_steps([1.0, 2.0], [None])
    with pytest.raises(Exception, match="threshold"):
        detect_steps([1.0, 2.0], threshold=5)


def test_sparkline() -> None:
    assert sparkline([1.0, 1.0, 8.0]) == "▁▁█"
    assert sparkline([2.0, 2.0]) == "▄▄" and sparkline([1.0, None, 2.0]) == "▁·█"


def test_history_of_three_recorded_runs_shows_the_step(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Zen 5 (07:54), the Zen 4 workloads run (12:23), Zen 3 (20:11), given out of order: numpy-add
    # dispatch was 0.32 us and 0.35 us, then 0.97 us on the Zen 3 guest.
    monkeypatch.setenv("COLUMNS", "160")
    assert cli.main(["history", str(ZEN3), str(ZEN5), str(ZEN4), "--case", "test_dispatch_cpu"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("test_runtime.py::test_dispatch_cpu[numpy-add]"))
    steps = [lines[first]] + [line for line in lines[first + 1:first + 3] if line.startswith(" ")]
    # the Zen 3 guest's 3x is the step at the third run; the Zen 4 guest's +10% (CIs under 1%) one too
    assert any("at 3 (354 ns -> 974 ns), commits e9f3f761f0..6c7cdb30db" in line for line in steps), steps
    assert any("+9.9% at 2 (322 ns -> 354 ns), commits cdd88ffab0..e9f3f761f0" in line for line in steps), steps
    assert out.index("amd-epyc-zen5") < out.index("amd-epyc-zen4") < out.index("amd-epyc-zen3")
    assert "note: the runs are of 3 targets or CPUs" in out


@pytest.fixture
def three_runs(tmp_path: Path) -> list[str]:
    """Three copies of the recorded Zen 5 memcpy cases: as recorded, unchanged at a later commit,
    then memcpy 1 MiB 30% slower at a third commit; and ``latest.json``, a copy of the last."""
    zen5 = recorded(ZEN5, lambda case: "test_memcpy_cpu" in case["id"])
    second = scaled(zen5, {}, created="2026-12-02T09:00:00+00:00", commit="a" * 40)
    third = scaled(zen5, {MEMCPY_1MIB: 1.3}, created="2026-12-03T09:00:00+00:00", commit="b" * 40)
    runs = tmp_path / "runs"
    runs.mkdir()
    paths = [write(runs / "run-1.json", zen5), write(runs / "run-2.json", second), write(runs / "run-3.json", third)]
    write(runs / "latest.json", third)
    (runs / "zen5.profile.json").write_text(json.dumps({"kind": "charz-profile", "version": 1}))
    return paths


def test_history_of_a_runs_directory_finds_the_synthetic_step(three_runs: list[str], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    runs = str(Path(three_runs[0]).parent)
    monkeypatch.setenv("COLUMNS", "200")          # the text fits the terminal's width: a wide one here
    assert cli.main(["history", runs, "--format", "json"]) == 0
    document = HISTORY.check(json.loads(capsys.readouterr().out), "stdout")
    assert [r["label"] for r in document["runs"]] == ["run-1", "run-2", "run-3"]     # latest.json once
    stepped = {c["id"]: c["steps"] for c in document["cases"] if c["steps"]}
    assert list(stepped) == [MEMCPY_1MIB]
    step = stepped[MEMCPY_1MIB][0]
    assert step["index"] == 2 and step["ratio"] == pytest.approx(1.3) and step["commits"] == "aaaaaaaaaa..bbbbbbbbbb"
    assert any("same run as" in n for n in document["notes"]) and any("not runs" in n for n in document["notes"])
    assert cli.main(["history", runs, "--all"]) == 0
    text = capsys.readouterr().out
    assert "1 with a step (1 slower, 0 faster)" in text and text.count("test_movement.py::") == len(document["cases"])
    monkeypatch.setenv("COLUMNS", "60")
    assert cli.main(["history", runs]) == 0
    narrow = capsys.readouterr().out
    assert all(len(line) <= 60 for line in narrow.splitlines()) and "aaaaaaaaaa..bbbbbbbbbb" in narrow
    pytest.importorskip("matplotlib")
    assert cli.main(["history", *three_runs, "-o", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "history.html").read_text()
    assert page.count("<svg") == 1 and page.index("<svg") < page.index("<table") and "+30.0%" in page
    assert 'src="http' not in page and "<script" not in page


def test_history_of_a_baseline_store_names_the_recorded_reasons(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_charz.store import DirectoryStore, Reference

    def reference(median_s: float) -> Reference:
        return Reference(median_s=median_s, ci_s=(median_s * 0.99, median_s * 1.01), samples_s=(median_s,) * 8,
                         noise_target=0.01, mode="hot", op="stream", provenance={"commit": "c" * 40},
                         created="2026-12-01T00:00:00+00:00")

    store = DirectoryStore(tmp_path / "baselines")
    for case, changed in (("suites/test_memory.py::test_stream[triad]", True),
                          ("suites/test_memory.py::test_stream[copy]", False)):
        store.put("mi300x", "suites/test_memory.py", case, reference(1e-3))
        for _ in range(2):
            store.add_session("mi300x", "suites/test_memory.py", case, reference(1e-3))
        if changed:
            store.accept("mi300x", "suites/test_memory.py", case, reference(1.25e-3), reason="driver 580 -> 590")
    assert cli.main(["history", str(tmp_path / "baselines"), "--format", "json"]) == 0
    document = HISTORY.check(json.loads(capsys.readouterr().out), "stdout")
    assert document["source"] == "store"
    steps = {c["id"]: c["steps"] for c in document["cases"]}
    assert steps["suites/test_memory.py::test_stream[copy]"] == []
    (step,) = steps["suites/test_memory.py::test_stream[triad]"]
    assert step["reason"] == "driver 580 -> 590" and math.isclose(step["ratio"], 1.25)
    assert cli.main(["history", str(tmp_path / "baselines")]) == 0
    assert "+25.0%" in capsys.readouterr().out


def test_refusals(tmp_path: Path, three_runs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["history", str(tmp_path / "nothing.json")]) == 2
    assert cli.main(["history", *three_runs, "--case", "no-such-case"]) == 2
    assert cli.main(["history", *three_runs, "--threshold", "3"]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["history", str(empty)]) == 2
    assert "no run file" in capsys.readouterr().err


def test_seeded_noise_gives_no_step_and_a_real_step_is_found_where_it_is() -> None:
    import numpy as np

    rng = np.random.default_rng(7)
    for _ in range(200):
        noise = 1.0 + 0.01 * rng.standard_normal(6)
        assert detect_steps(list(noise), [ci(m, 0.01) for m in noise]) == []
        at = int(rng.integers(1, 6))
        stepped = [m * (1.10 if i >= at else 1.0) for i, m in enumerate(noise)]
        assert [s.index for s in detect_steps(stepped, [ci(m, 0.01) for m in stepped])] == [at]


@given(st.lists(st.floats(0.5, 2.0), min_size=1, max_size=12), st.floats(1e-9, 1e3))
def test_steps_do_not_depend_on_the_unit(medians: list[float], scale: float) -> None:
    intervals = [ci(m, 0.01) for m in medians]
    steps = detect_steps(medians, intervals)
    rescaled = detect_steps([m * scale for m in medians], [(lo * scale, hi * scale) for lo, hi in intervals])
    assert [s.index for s in rescaled] == [s.index for s in steps]
    # a step's ratio is above 1 + threshold or below 1 / (1 + threshold)
    assert all(abs(math.log(s.ratio)) > math.log(1.05) for s in steps)
