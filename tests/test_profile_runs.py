"""Which runs one profile merges: one hardware identity and one scope (full or smoke), each run
left out named with its reason, and each merged figure with the runs it came from."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_profile import ceiling, run_dict, synthetic_cases

from pytest_charz import cli
from pytest_charz.profile import build_profile
from pytest_charz.profile.build import comparable_runs
from pytest_charz.run import load_run
from pytest_charz.records import Run

RUNS = Path(__file__).parent / "data" / "runs"


def run_of(fma_fp64: float, *, quick: bool = False, command: tuple[str, ...] = ("pytest", "suites/"),
           seed: int = 0, host: str = "box1") -> Run:
    data: dict[str, Any] = run_dict(synthetic_cases(fma_fp64, seed), version=2)
    data["settings"] = {"quick": quick}
    data["provenance"] = {**data["provenance"], "host": host, "command": ["python", "-m", *command]}
    return Run.from_json(data, "run")


def test_a_smoke_run_is_left_out_of_a_full_runs_profile_and_the_figures_stay_the_full_runs() -> None:
    full, smoke = run_of(0.9e12), run_of(0.5e12, quick=True, seed=1)
    merged = build_profile([full, smoke], ["full.json", "quick.json"])
    assert [run["path"] for run in merged["runs"]] == ["full.json"]
    (left_out,) = merged["left_out"]
    assert left_out["path"] == "quick.json" and "smoke run (--charz-quick)" in left_out["reason"]
    assert ceiling(merged, "flops:fp64")["value"] == pytest.approx(0.9e12)
    assert any(caveat.startswith("left out quick.json: a smoke run") for caveat in merged["caveats"])


def test_the_full_run_is_kept_whatever_the_order_given() -> None:
    merged = build_profile([run_of(0.5e12, quick=True), run_of(0.9e12, seed=1)], ["quick.json", "full.json"])
    assert [run["path"] for run in merged["runs"]] == ["full.json"]
    assert ceiling(merged, "flops:fp64")["value"] == pytest.approx(0.9e12)


def test_a_selection_on_the_recorded_command_line_makes_a_smoke_run() -> None:
    narrowed = run_of(0.5e12, command=("pytest", "suites/", "-k", "gemm"), seed=1)
    merged = build_profile([run_of(0.9e12), narrowed], ["full.json", "k.json"])
    assert "a -k selection ('gemm')" in merged["left_out"][0]["reason"]


def test_a_run_of_another_cpu_under_the_target_id_cpu_is_left_out() -> None:
    # Zen 5 and Zen 3 guests: both "cpu", both "AMD EPYC", two fingerprints
    zen5, zen3 = load_run(str(RUNS / "amd-epyc-zen5-kvm-2vcpu.run.json.gz")), \
        load_run(str(RUNS / "amd-epyc-zen3-kvm-2vcpu.run.json.gz"))
    kept, left_out = comparable_runs([zen5, zen3], ["zen5.json", "zen3.json"])
    assert kept == [0] and left_out[0]["path"] == "zen3.json"
    assert "measured on other hardware (cpu-amd-epyc-" in left_out[0]["reason"]
    assert comparable_runs([zen5, zen5], ["a.json", "b.json"]) == ([0, 1], [])


def test_merged_figures_say_which_runs_they_came_from() -> None:
    runs = [run_of(0.9e12, host="node0"), run_of(0.8e12, seed=1, host="node1")]
    merged = build_profile(runs, ["node0.json", "node1.json"])
    assert "left_out" not in merged
    fp64 = ceiling(merged, "flops:fp64")
    assert fp64["evidence"]["from_runs"] == ["node0.json", "node1.json"]
    assert fp64["value"] == pytest.approx(0.85e12)
    # the Markdown (and HTML) table says it, with the runs numbered in the list above it
    from pytest_charz.report.markdown import ceiling_rows, render_markdown

    headers, rows = ceiling_rows(merged)
    row = next(r for r in rows if r[0] == "flops:fp64")
    assert ", from all 2 runs" in row[headers.index("evidence")]
    one_of_two = {**merged, "ceilings": [{**fp64, "evidence": {**fp64["evidence"], "runs": [1]}}]}
    assert ", from run 2 of 2" in ceiling_rows(one_of_two)[1][0][headers.index("evidence")]
    text = render_markdown(merged)
    assert "**run 1** `node0.json`" in text and "**run 2** `node1.json`" in text


def test_a_single_run_profile_has_no_per_figure_run_list() -> None:
    single = build_profile([run_of(0.9e12)], ["one.json"])
    assert all("from_runs" not in c["evidence"] for c in single["ceilings"]) and "left_out" not in single


def test_charz_profile_says_what_it_left_out_and_where_figures_came_from(tmp_path, capsys) -> None:
    def write(name: str, run: Run) -> str:
        path = tmp_path / name
        path.write_text(json.dumps(run.to_json()))
        return str(path)

    full_a, full_b = write("a.json", run_of(0.9e12)), write("b.json", run_of(0.8e12, seed=1))
    quick = write("quick.json", run_of(0.5e12, quick=True, seed=2))
    assert cli.main(["profile", full_a, quick, full_b, "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "from 2 run(s) of the 3 given" in out
    assert f"left out {quick}: a smoke run (--charz-quick)" in out
    assert f"figures from: {full_a} (" in out and f"{full_b} (" in out
