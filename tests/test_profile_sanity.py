"""Sane ceilings: a figure that contradicts what the hardware can do is flagged with its evidence,
kept out of the ceiling and named in the bottom line (``pytest_charz/profile/sanity.py``).

The recorded Zen 3 guest's run has all three kinds: its 2-thread fp32 FMA case measured 11% of
the peak, below its 1-thread twin; the best fp32 FMA figure left (the 1-thread case) is below
the fp32 GEMM; its bf16 GEMM runs at under 1% of the fp32 peak on a CPU without native bf16. The
recorded Zen 5 guest's figures are sane and stay as they were. Every expectation is read from the
recorded run (its cases, its spec), never from the host running the tests.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_profile import ceiling, make_case, make_run

from pytest_charz.models.ceilings import Ceilings
from pytest_charz.profile import build_profile
from pytest_charz.profile.figures import SpecView
from pytest_charz.profile.sanity import check_ceilings
from pytest_charz.records import Run
from pytest_charz.report.markdown import render_markdown
from pytest_charz.run import load_run

RUNS = Path(__file__).parent / "data" / "runs"
ZEN3 = RUNS / "amd-epyc-zen3-kvm-2vcpu.run.json.gz"
ZEN5 = RUNS / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"
FMA_FP32_2 = "suites/test_compute.py::test_fma_cpu[fp32-threads2]"
FMA_FP32_1 = "suites/test_compute.py::test_fma_cpu[fp32-threads1]"


@pytest.fixture(scope="module")
def zen3_run() -> Run:
    return load_run(str(ZEN3))


@pytest.fixture(scope="module")
def zen3(zen3_run: Run) -> dict[str, Any]:
    return build_profile([zen3_run], [ZEN3.name])


@pytest.fixture(scope="module")
def zen5_run() -> Run:
    return load_run(str(ZEN5))


@pytest.fixture(scope="module")
def zen5(zen5_run: Run) -> dict[str, Any]:
    return build_profile([zen5_run], [ZEN5.name])


def _rate(run: Run, case_id: str, dtype: str) -> float:
    case = next(c for c in run.cases if c.id == case_id)
    return case.work.flops[dtype] / case.measurement.median_s


def _row(profile: dict[str, Any], name: str) -> dict[str, Any]:
    found = [row for row in profile["bottom_line"] if row["name"] == name]
    assert len(found) == 1, f"{name} not in the bottom line: {[r['name'] for r in profile['bottom_line']]}"
    return found[0]


def _value(profile: dict[str, Any], name: str) -> float | None:
    found = [c["value"] for c in profile["ceilings"] if c["name"] == name]
    return found[0] if found else None


#: (bounded, bound): the first is never below the second on a CPU without matrix units.
CPU_BOUNDS = [("flops:fp32", "gemm:fp32"), ("flops:fp64", "gemm:fp64"), ("flops:fp32", "flops:fp64"),
              *[(f"bandwidth:{near}", f"bandwidth:{far}") for near, far in
                (("l1", "l2"), ("l1", "l3"), ("l1", "dram"), ("l2", "l3"), ("l2", "dram"), ("l3", "dram"))],
              *[(f"latency:{far}", f"latency:{near}") for near, far in
                (("l1", "l2"), ("l1", "l3"), ("l1", "dram"), ("l2", "l3"), ("l2", "dram"), ("l3", "dram"))]]


# -- the acceptance, on the recorded Zen 3 run ----------------------------------------------------
def test_zen3_fp32_peak_is_flagged_or_near_the_derived_peak(zen3: dict[str, Any]) -> None:
    fp32 = ceiling(zen3, "flops:fp32")
    near = fp32["value"] is not None and abs(fp32["value"] / fp32["spec"] - 1) <= 0.10
    assert fp32.get("flags") or near
    # this run's FMA figure is below its GEMM: flagged, and the ceiling is not the contradicted one
    assert "below-bound" in {flag["rule"] for flag in fp32["flags"]}
    assert fp32["value"] >= ceiling(zen3, "gemm:fp32")["value"]
    assert fp32["fraction_of_spec"] == pytest.approx(fp32["value"] / fp32["spec"])


@pytest.mark.parametrize("which", ["zen3", "zen5"])
def test_no_ceiling_is_below_a_ceiling_that_bounds_it(which: str, request: pytest.FixtureRequest) -> None:
    profile = request.getfixturevalue(which)
    checked = 0
    for bounded, bound in CPU_BOUNDS:
        high, low = _value(profile, bounded), _value(profile, bound)
        if high is not None and low is not None:
            assert high >= low, f"{which}: {bounded} ({high:.4g}) below {bound} ({low:.4g})"
            checked += 1
    assert checked >= 15       # both runs have every one of these ceilings but gemm:fp64's pair on one


def test_the_rule_is_the_gemm_rate_and_the_fma_figure_is_kept_as_measured(
        zen3: dict[str, Any], zen3_run: Run) -> None:
    fp32 = ceiling(zen3, "flops:fp32")
    gemm = ceiling(zen3, "gemm:fp32")
    assert fp32["value"] == pytest.approx(gemm["value"])
    assert fp32["measured"] == pytest.approx(_rate(zen3_run, FMA_FP32_1, "fp32"))
    below = next(flag for flag in fp32["flags"] if flag["rule"] == "below-bound")
    assert below["taken_from"] == "gemm:fp32" and below["bounds"] == ["gemm:fp32"]
    # the caveat says which rule and why, and that the derived peak was not taken
    assert "same FMA pipes" in below["text"] and "Rule:" in below["text"]
    assert "derived peak" in below["text"] and "not taken" in below["text"]
    # models read the consistent figure: the vector peak is no longer below the GEMM
    measured = Ceilings.from_profile(zen3)
    assert measured.vector_peak_flops["fp32"].value == pytest.approx(gemm["value"])
    assert measured.peak_flops["fp32"].value == pytest.approx(gemm["value"])


def test_a_two_thread_case_slower_than_its_one_thread_twin_is_flagged_and_no_ceiling_rests_on_it(
        zen3: dict[str, Any], zen3_run: Run) -> None:
    fp32 = ceiling(zen3, "flops:fp32")
    twin = next(flag for flag in fp32["flags"] if flag["rule"] == "slower-than-twin")
    assert twin["case"] == FMA_FP32_2 and twin["twin"] == FMA_FP32_1
    assert (twin["threads"], twin["twin_threads"]) == (2, 1)
    assert twin["rate"] == pytest.approx(_rate(zen3_run, FMA_FP32_2, "fp32"))
    assert twin["rate"] < 0.5 * twin["twin_rate"]
    assert FMA_FP32_2 not in fp32["evidence"]["cases"] and FMA_FP32_1 in fp32["evidence"]["cases"]
    assert "11% of the peak" in twin["text"] and "a lower bound on the 2-thread peak" in twin["text"]
    assert twin["text"] in fp32["caveats"]
    # the fp64 twins scale (2 threads do twice the one-thread rate): nothing flagged there
    assert not ceiling(zen3, "flops:fp64").get("flags")


def test_bf16_gemm_without_native_bf16_says_so_in_the_bottom_line(zen3: dict[str, Any]) -> None:
    bf16 = ceiling(zen3, "gemm:bf16")
    assert bf16["spec"] is None                      # the recorded spec has no bf16 peak
    flag = bf16["flags"][0]
    assert flag["rule"] == "far-below-peak" and flag["cause"] == "no native bf16"
    assert flag["fraction"] < 0.01                   # of the fp32 peak that bounds converted bf16
    assert bf16["value"] == pytest.approx(bf16["evidence"]["values"][0])   # the figure stays
    row = _row(zen3, "gemm:bf16")
    assert row["flagged"] == ["far-below-peak"] and "no native bf16" in row["caveat"]


def test_the_bottom_line_and_the_markdown_name_the_flagged_ceilings(zen3: dict[str, Any]) -> None:
    row = _row(zen3, "flops:fp32")
    assert row["flagged"] == ["below-bound", "slower-than-twin"]
    assert row["caveat"].startswith("flops:fp32 measured") and "gemm:fp32" in row["caveat"]
    assert not _row(zen3, "flops:fp64").get("flagged")
    assert any("flagged ceilings" in c and "flops:fp32" in c and "gemm:bf16" in c for c in zen3["caveats"])
    text = render_markdown(zen3)
    bottom = text.split("## Bottom line", 1)[1].split("##", 1)[0]
    assert "| flops:fp32 (flagged: below-bound, slower-than-twin) |" in bottom
    assert "| gemm:bf16 (flagged: far-below-peak) |" in bottom and "no native bf16" in bottom


def test_zen5_keeps_its_sane_figures(zen5: dict[str, Any]) -> None:
    assert not [c["name"] for c in zen5["ceilings"] if c.get("flags") or "measured" in c]
    assert not [row["name"] for row in zen5["bottom_line"] if row.get("flagged")]
    for name in ("flops:fp32", "flops:fp64"):
        assert ceiling(zen5, name)["fraction_of_spec"] == pytest.approx(1.0, abs=0.05)
    assert ceiling(zen5, "gemm:bf16")["fraction_of_spec"] == pytest.approx(0.88, abs=0.01)
    assert not any("no native" in c for c in ceiling(zen5, "gemm:bf16")["caveats"])


def test_two_runs_keep_each_runs_flags(zen3_run: Run) -> None:
    merged = build_profile([zen3_run, zen3_run], ["a", "b"])
    twins = [f for f in ceiling(merged, "flops:fp32")["flags"] if f["rule"] == "slower-than-twin"]
    assert sorted(f["run"] for f in twins) == [0, 1]


# -- the rules on synthetic runs ------------------------------------------------------------------
def _fma(case_id: str, rate: float, threads: int, dtype: str = "fp64", **kwargs: Any) -> dict[str, Any]:
    return make_case(case_id, "fma", 1e9 / rate, flops={dtype: 1e9}, shape={"threads": threads, "chains": 8}, **kwargs)


def test_a_peak_far_below_the_spec_with_no_cause_is_dropped_but_named() -> None:
    # the synthetic spec's fp64 peak is 1 TFLOP/s; one all-thread case at 5% of it, nothing else
    profile = build_profile([make_run([_fma("test_fma[fp64-2]", 0.05e12, 2)])])
    fp64 = ceiling(profile, "flops:fp64")
    assert fp64["value"] is None and fp64["measured"] == pytest.approx(0.05e12)
    assert fp64["fraction_of_spec"] is None
    assert fp64["flags"][0]["rule"] == "far-below-peak" and fp64["flags"][0]["cause"] is None
    assert "no recorded cause" in fp64["flags"][0]["text"]
    row = _row(profile, "flops:fp64")
    assert row["value"] is None and row["flagged"] == ["far-below-peak"]
    assert "fp64" not in Ceilings.from_profile(profile).peak_flops   # models fall back to the spec


def test_a_low_peak_with_other_load_recorded_is_left_to_that_caveat() -> None:
    case = _fma("test_fma[fp64-2]", 0.05e12, 2, flags=["other-load"])
    case["conditions"]["interval"]["other_cpu_s_per_s"] = 1.0
    fp64 = ceiling(build_profile([make_run([case])]), "flops:fp64")
    assert fp64["value"] == pytest.approx(0.05e12) and not fp64.get("flags")
    assert any(c.startswith("other load") for c in fp64["caveats"])


def test_twins_within_tolerance_are_not_flagged_and_more_threads_that_scale_are_the_ceiling() -> None:
    cases = [_fma("test_fma[fp64-2]", 0.47e12, 2), _fma("test_fma[fp64-1]", 0.5e12, 1),
             _fma("test_fma[fp32-2]", 1.8e12, 2, "fp32"), _fma("test_fma[fp32-1]", 0.9e12, 1, "fp32")]
    profile = build_profile([make_run(cases)])
    assert not any(c.get("flags") for c in profile["ceilings"])
    assert ceiling(profile, "flops:fp32")["value"] == pytest.approx(1.8e12)


def test_a_stream_case_slower_than_its_twin_does_not_make_the_dram_ceiling() -> None:
    size = 512 * 2**20

    def stream(threads: int, rate: float) -> dict[str, Any]:
        return make_case(f"test_stream[triad-{threads}]", "stream", 3 * size / rate, bytes_={"dram": 3.0 * size},
                         shape={"kernel": "triad", "threads": threads, "working_set_bytes": size})

    dram = ceiling(build_profile([make_run([stream(2, 20e9), stream(1, 60e9)])]), "bandwidth:dram")
    assert dram["value"] == pytest.approx(60e9)
    assert dram["flags"][0]["rule"] == "slower-than-twin"
    assert dram["flags"][0]["case"].endswith("test_stream[triad-2]")


def _bare(name: str, value: float, unit: str, spec: float | None = None) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "spec": spec, "spec_source": None,
            "fraction_of_spec": value / spec if spec else None, "evidence": {"conditions": {}}, "caveats": []}


def test_a_nearer_level_slower_than_a_farther_one_takes_its_figure_and_latencies_rise_outward(
        zen5_run: Run) -> None:
    spec = SpecView(zen5_run.target.spec)        # its caches: l1, l2, l3, then dram
    ceilings = [_bare("bandwidth:l1", 300e9, "B/s"), _bare("bandwidth:l2", 400e9, "B/s"),
                _bare("bandwidth:l3", 410e9, "B/s"), _bare("latency:l2", 4e-9, "s"), _bare("latency:l3", 3e-9, "s")]
    notes = check_ceilings(ceilings, spec, "cpu")
    l1, l2, l3, lat2, lat3 = ceilings
    # l1 below both farther levels: it takes the highest of them, flagged
    assert l1["value"] == pytest.approx(410e9) and l1["measured"] == pytest.approx(300e9)
    assert l1["flags"][0]["rule"] == "below-bound" and l1["flags"][0]["taken_from"] == "bandwidth:l3"
    assert l1["flags"][0]["bounds"] == ["bandwidth:l2", "bandwidth:l3"]
    # l2 below l3 within the tolerance: raised with a note, not a flag
    assert l2["value"] == pytest.approx(410e9) and not l2.get("flags")
    assert any("within 5%" in c for c in l2["caveats"])
    assert l3["value"] == pytest.approx(410e9) and "measured" not in l3 and not l3.get("flags")
    assert lat2["value"] == pytest.approx(4e-9) and not lat2.get("flags")
    assert lat3["value"] == pytest.approx(4e-9) and lat3["flags"][0]["taken_from"] == "latency:l2"
    assert "missed l2 first" in lat3["flags"][0]["text"]
    assert notes and "bandwidth:l1" in notes[0] and "latency:l3" in notes[0]


def test_a_narrower_dtype_below_a_wider_one_on_the_same_pipes_takes_its_figure() -> None:
    # the synthetic spec: fp32 peak 2 TFLOP/s, fp64 1 TFLOP/s, one peak each (no matrix units)
    profile = build_profile([make_run([_fma("test_fma[fp64-2]", 0.9e12, 2),
                                       _fma("test_fma[fp32-2]", 0.6e12, 2, "fp32")])])
    fp32 = ceiling(profile, "flops:fp32")
    assert fp32["value"] == pytest.approx(0.9e12) and fp32["measured"] == pytest.approx(0.6e12)
    assert fp32["flags"][0]["rule"] == "below-bound" and fp32["flags"][0]["taken_from"] == "flops:fp64"
    assert fp32["fraction_of_spec"] == pytest.approx(0.45)
    assert not ceiling(profile, "flops:fp64").get("flags")
