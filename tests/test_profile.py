"""Capability profiles from synthetic runs whose achieved rates are known."""
from __future__ import annotations

import json
import math
import re
import sys
from html.parser import HTMLParser
from typing import Any

import numpy as np
import pytest

from pytest_charz import cli
from pytest_charz.errors import CharzError, FormatError, MissingExtraError
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.profile import build_profile, load_profile
from pytest_charz.records import Run
from pytest_charz.report.markdown import render_markdown
from pytest_charz.report.profile_command import profile_paths
from pytest_charz.targets.spec import Compute, Figure, Identity, Link, MemoryLevel, TargetSpec

KIB = 1024
MIB = 1024 * KIB
HOST_PEAK_SOURCE = "derived: 2 cores x 2 FMA units x 4 fp64 lanes x 2 FLOP x 3.0 GHz (lscpu)"


def make_spec(target_id: str = "testbox") -> dict[str, Any]:
    def level(name, capacity, bandwidth, latency_ns):
        return MemoryLevel(name, name.upper(), "unit" if name == "l1" else "socket",
                           Figure(capacity, "sysfs") if capacity else None, Figure(bandwidth, "vendor guide"),
                           Figure(latency_ns, "vendor guide"))

    spec = TargetSpec(
        identity=Identity(target_id, "Test Box", "testvendor", "cpu", "cpu"),
        compute=Compute(Figure(2, "lscpu"), "core", None, None,
                        {"fp64": Figure(1.0e12, HOST_PEAK_SOURCE), "fp32": Figure(2.0e12, HOST_PEAK_SOURCE)}),
        memory=(level("l1", 48 * KIB, 4e12, 1.0), level("l2", 2 * MIB, 2e12, 4.0),
                level("l3", 32 * MIB, 1e12, 15.0), level("dram", None, 100e9, 90.0)),
        host_link=Link("pcie4-x16", Figure(32e9, "PCIe 4.0 x16 per direction"), Figure(1.5, "typical")),
        peer_links=(), power=None, sources={}, origin="derived at run time")
    return spec.to_json()


def make_case(case_id: str, op: str, median_s: float, *, shape: dict | None = None, flops: dict | None = None,
              bytes_: dict | None = None, transfers: dict | None = None, launches: int = 0, accesses: int = 0,
              kept: int = 10, discarded: int = 0, noise_met: bool = True, steal: float = 0.0,
              flags: list[str] | None = None, freq_change: float | None = 0.0) -> dict[str, Any]:
    """A case record in the run-file format with a known median time (and so known rates)."""
    flags = list(flags or [])
    if not noise_met:
        flags.append("noisy")
    if steal > 0.02:
        flags.append("steal")
    return {
        "id": f"suites/test_synth.py::{case_id}", "nodeid": f"suites/test_synth.py::{case_id}",
        "suite": "suites/test_synth.py", "test": case_id.split("[")[0], "label": "", "params": {},
        "work": {"flops": flops or {}, "bytes": bytes_ or {}, "launches": launches, "transfers": transfers or {},
                 "collectives": [], "op": op, "shape": shape or {}, "accesses": accesses},
        "settings": {},
        "measurement": {"samples_s": [median_s] * kept, "inner_loops": 1, "mode": "hot", "taken": kept + discarded,
                        "kept": kept, "discarded": {"throttled": discarded} if discarded else {}, "warmup_calls": 1,
                        "stop_reason": "noise-target" if noise_met else "time-budget", "elapsed_s": 1.0,
                        "noise_target": 0.01, "noise_met": noise_met, "ci_level": 0.95, "median_s": median_s,
                        "ci_s": [median_s * 0.99, median_s * 1.01], "iqr_s": [median_s, median_s],
                        "rel_ci_halfwidth": 0.01 if noise_met else 0.08, "outliers": 0,
                        "timer_resolution_s": 1e-9, "notes": []},
        "conditions": {"before": {"device": None}, "after": {"device": None},
                       "interval": {"steal_fraction": steal, "other_cpu_s_per_s": 0.0, "cpu_freq_change": freq_change,
                                    "throttle_reasons": [], "flags": []}},
        "achieved": {}, "peak_fraction": {}, "flags": flags,
    }


def staircase(sizes, capacities, levels, width=0.1):
    log_y = np.full(len(sizes), math.log(levels[0]))
    for capacity, (before, after) in zip(capacities, zip(levels, levels[1:])):
        log_y += (math.log(after) - math.log(before)) / (1 + np.exp(-(np.log(sizes) - math.log(capacity) - 0.3) / width))
    return np.exp(log_y)


def synthetic_cases(fma_fp64: float = 0.9e12, noise_seed: int = 0) -> list[dict[str, Any]]:
    """Every kind of case, with achieved rates chosen here."""
    rng = np.random.default_rng(noise_seed)
    cases = [
        make_case("test_fma[fp64-2]", "fma", 1e9 / fma_fp64, flops={"fp64": 1e9}, shape={"threads": 2, "chains": 8},
                  steal=0.031),
        make_case("test_fma[fp64-1]", "fma", 1e9 / 0.5e12, flops={"fp64": 1e9}, shape={"threads": 1, "chains": 8},
                  noise_met=False),
        make_case("test_fma[fp32-2]", "fma", 1e9 / 1.8e12, flops={"fp32": 1e9}, shape={"threads": 2, "chains": 8},
                  kept=7, discarded=3),
    ]
    for n, rate in ((256, 0.7e12), (1024, 0.8e12)):
        cases.append(make_case(f"test_gemm[fp64-{n}]", "gemm", 2 * n**3 / rate, flops={"fp64": 2.0 * n**3},
                               bytes_={"dram": 3.0 * n * n * 8}, shape={"m": n, "n": n, "k": n}))
    for threads, size, rate in ((2, 64 * MIB, 95e9), (2, 256 * MIB, 80e9), (2, 512 * MIB, 82e9), (1, 512 * MIB, 40e9)):
        cases.append(make_case(f"test_stream[triad-{threads}-{size}]", "stream", 3 * size / rate,
                               bytes_={"dram": 3.0 * size},
                               shape={"kernel": "triad", "threads": threads, "working_set_bytes": size}))
    sizes = np.geomspace(4 * KIB, 1024 * MIB, 30)
    # read cases run 2 threads, each on half the working set: the private L1 (48 KiB per core)
    # ends at 96 KiB of total working set; the shared levels end where they are.
    bandwidth = staircase(sizes, [2 * 48 * KIB, 2 * MIB, 32 * MIB], [3.6e12, 1.6e12, 0.8e12, 0.09e12])
    bandwidth *= np.exp(rng.normal(0, 0.02, sizes.size))
    latency = staircase(sizes, [48 * KIB, 2 * MIB, 32 * MIB], [1.1e-9, 4.2e-9, 16e-9, 95e-9])
    for size, rate, per_access in zip(sizes, bandwidth, latency):
        size = float(round(size))
        cases.append(make_case(f"test_read[{int(size)}]", "read", 1e9 / rate, bytes_={"l1": 1e9},
                               shape={"working_set_bytes": size, "threads": 2}))
        cases.append(make_case(f"test_chase[{int(size)}]", "chase", per_access * 1e6, accesses=1_000_000,
                               shape={"working_set_bytes": size, "line_bytes": 64}))
    for size in np.geomspace(1024, 1 << 30, 12):
        cases.append(make_case(f"test_h2d[pinned-{int(size)}]", "transfer", 2e-6 + size / 25e9,
                               transfers={"h2d": float(size)}, shape={"bytes": float(size), "kind": "h2d", "pinned": True}))
        cases.append(make_case(f"test_h2d[pageable-{int(size)}]", "transfer", 5e-6 + size / 10e9,
                               transfers={"h2d": float(size)}, shape={"bytes": float(size), "kind": "h2d", "pinned": False}))
    cases.append(make_case("test_d2h[1GiB]", "transfer", (1 << 30) / 20e9, transfers={"d2h": float(1 << 30)},
                           shape={"bytes": float(1 << 30), "kind": "d2h", "pinned": True}))
    cases += [
        make_case("test_launch[empty]", "launch", 100 * 5e-6, launches=100, shape={"kind": "empty"}),
        make_case("test_launch[graph]", "launch", 100 * 2e-6, launches=100, shape={"kind": "graph"}),
        make_case("test_dispatch[add]", "dispatch", 1.5e-6, shape={"kind": "torch-add"}),
        make_case("test_wakeup[event]", "wakeup", 30e-6, shape={"kind": "event"}),
        make_case("test_fresh_pages", "allocation", 10240 * 1.7e-6,
                  shape={"kind": "torch-fresh-pages", "framework": "torch", "pages": 10240}),
        make_case("test_contention[alone]", "contention", 1e-3,
                  shape={"role": "alone", "pair": "stream-vs-gemm", "aggressor": "gemm"}),
        make_case("test_contention[contended]", "contention", 1.5e-3,
                  shape={"role": "contended", "pair": "stream-vs-gemm", "aggressor": "gemm"}),
        make_case("test_broken", "fma", 1.0, flops={"fp64": 1.0}, flags=["all-discarded"]),
    ]
    cases[-1]["measurement"]["median_s"] = None
    return cases


def run_dict(cases: list[dict[str, Any]], target_id: str = "testbox", version: int = 1) -> dict[str, Any]:
    """A run file's JSON (version 1 by default) holding ``cases``."""
    return {"version": version, "kind": "charz-run", "created": "2025-01-02T03:04:05+00:00", "status": "complete",
            "target": {"id": target_id, "name": "Test Box", "kind": "cpu", "origin": "derived at run time",
                       "spec": make_spec(target_id)},
            "device": {"backend": "cpu", "index": 0, "name": "Test CPU", "ids": {}, "versions": {"numpy": "2.0"}},
            "provenance": {"host": "box1", "os": {"platform": "Linux-6"}, "cpu": {"model": "Test CPU"},
                           "python": {"version": "3.11.2"}, "libraries": {"numpy": "2.0"}, "suite_git": None},
            "settings": {}, "quick": False, "cases": cases}


def make_run(cases: list[dict[str, Any]], target_id: str = "testbox") -> Run:
    """The typed Run of :func:`run_dict` (what ``build_profile`` reads)."""
    return Run.from_json(run_dict(cases, target_id), "test run")


def write_run(path, run) -> str:
    path.write_text(json.dumps(run))
    return str(path)


@pytest.fixture(scope="module")
def profile() -> dict[str, Any]:
    return build_profile([make_run(synthetic_cases())], ["runs/one.json"])


def ceiling(profile: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in profile["ceilings"] if c["name"] == name]
    assert len(found) == 1, f"{name} not in {[c['name'] for c in profile['ceilings']]}"
    return found[0]


def test_profile_header(profile):
    assert profile["version"] == 1 and profile["kind"] == "charz-profile"
    assert profile["target"] == {"id": "testbox", "name": "Test Box", "kind": "cpu",
                                 "origin": "derived at run time", "compute_units": 2}
    assert profile["runs"][0]["path"] == "runs/one.json" and profile["runs"][0]["status"] == "complete"
    assert profile["provenance"]["hosts"] == ["box1"] and profile["provenance"]["cpu"] == "Test CPU"
    assert any("all samples discarded" in c for c in profile["caveats"])
    json.dumps(profile, allow_nan=False)


def test_every_kind_of_case_gives_its_ceiling(profile):
    names = {c["name"] for c in profile["ceilings"]}
    assert {"flops:fp64", "flops:fp32", "gemm:fp64", "bandwidth:dram", "bandwidth:l1", "bandwidth:l2",
            "bandwidth:l3", "capacity:l1", "capacity:l2", "capacity:l3", "latency:l1", "latency:l2", "latency:l3",
            "latency:dram", "transfer:h2d", "transfer:d2h", "launch", "dispatch", "dispatch:torch", "wakeup",
            "fresh-page:torch", "slowdown:stream-vs-gemm"} == names


def test_best_rate_per_dtype_with_fraction_of_spec_and_its_source(profile):
    fp64 = ceiling(profile, "flops:fp64")
    assert fp64["value"] == pytest.approx(0.9e12) and fp64["unit"] == "FLOP/s"
    assert fp64["spec"] == pytest.approx(1.0e12) and fp64["fraction_of_spec"] == pytest.approx(0.9)
    assert fp64["spec_source"] == HOST_PEAK_SOURCE
    assert fp64["evidence"]["best_case"] == "suites/test_synth.py::test_fma[fp64-2]"
    assert len(fp64["evidence"]["cases"]) == 2        # the all-discarded case is not evidence
    assert ceiling(profile, "gemm:fp64")["value"] == pytest.approx(0.8e12)


def test_evidence_counts_samples_and_discards(profile):
    fp32 = ceiling(profile, "flops:fp32")
    assert fp32["evidence"]["samples"] == 7 and fp32["evidence"]["discarded"] == 3
    assert ceiling(profile, "flops:fp64")["evidence"]["samples"] == 20


def test_caveats_for_noise_and_steal(profile):
    fp64 = ceiling(profile, "flops:fp64")
    assert "noise target missed in 1 of 2 cases" in fp64["caveats"]
    assert "steal time up to 3.1%" in fp64["caveats"]
    assert "single run" in fp64["caveats"]
    assert fp64["evidence"]["conditions"]["max_steal_fraction"] == pytest.approx(0.031)
    clean = ceiling(profile, "gemm:fp64")
    assert not [c for c in clean["caveats"] if "noise" in c or "steal" in c]


def test_stream_counts_only_all_thread_cases_beyond_the_llc(profile):
    dram = ceiling(profile, "bandwidth:dram")
    # 64 MiB is under 4 x 32 MiB LLC (95 GB/s there is cache help); the 1-thread case is not all threads.
    assert dram["value"] == pytest.approx(82e9)
    assert dram["fraction_of_spec"] == pytest.approx(0.82)
    assert len(dram["evidence"]["cases"]) == 2


def test_memory_levels_and_capacities(profile):
    assert ceiling(profile, "bandwidth:l1")["value"] == pytest.approx(3.6e12, rel=0.05)
    assert ceiling(profile, "bandwidth:l3")["value"] == pytest.approx(0.8e12, rel=0.05)
    for level, capacity in (("l1", 48 * KIB), ("l2", 2 * MIB), ("l3", 32 * MIB)):
        found = ceiling(profile, f"capacity:{level}")
        assert capacity / 2 <= found["value"] <= capacity * 2 and found["unit"] == "B"
        assert found["spec"] == capacity
    assert ceiling(profile, "latency:dram")["value"] == pytest.approx(95e-9, rel=0.05)
    assert ceiling(profile, "latency:l1")["spec"] == pytest.approx(1e-9)
    boundaries = profile["curves"]["bandwidth"]["boundaries"]
    assert [b["level"] for b in boundaries] == ["l1", "l2", "l3"]
    # the per-core level's bandwidth boundary is the total working set over the threads; where the
    # latency curve agrees, the capacity is the geometric mean of both curves' boundaries
    rows = {row["level"]: row for row in profile["curves"]["levels"]["rows"]}
    assert rows["l1"]["bandwidth_bytes"] == pytest.approx(boundaries[0]["capacity_bytes"] / 2)
    l1 = ceiling(profile, "capacity:l1")
    assert l1["value"] == pytest.approx(math.sqrt(rows["l1"]["bandwidth_bytes"] * rows["l1"]["latency_bytes"]))
    assert any("per core" in caveat and "both curves agree" in caveat for caveat in l1["caveats"])
    assert rows["l2"]["bandwidth_bytes"] == pytest.approx(boundaries[1]["capacity_bytes"])


def test_page_local_walks_set_the_latency_levels_and_random_walks_show_tlb_misses():
    sizes = np.geomspace(16 * KIB, 1024 * MIB, 30)
    local = staircase(sizes, [48 * KIB, 2 * MIB, 32 * MIB], [1.1e-9, 4.2e-9, 16e-9, 95e-9])
    cases = [make_case(f"test_chase[page-local-{int(s)}]", "chase", v * 1e6, accesses=1_000_000,
                       shape={"working_set_bytes": float(round(s)), "line_bytes": 64, "pattern": "page-local"})
             for s, v in zip(sizes, local)]
    # The fully random walk pays a page walk on most loads past a few MiB: 3x the latency at 1 GiB.
    walk_sizes = [4 * MIB, 64 * MIB, 1024 * MIB]
    cases += [make_case(f"test_chase[random-{s}]", "chase", v * 1e6, accesses=1_000_000,
                        shape={"working_set_bytes": float(s), "line_bytes": 64, "pattern": "random"})
              for s, v in zip(walk_sizes, (20e-9, 180e-9, 290e-9))]
    found = build_profile([make_run(cases)], ["r.json"])
    dram = ceiling(found, "latency:dram")
    assert dram["value"] == pytest.approx(95e-9, rel=0.05)
    assert any("page-local" in c for c in dram["caveats"])
    assert any("fully random walk" in c and "290 ns" in c and "1 GiB" in c for c in dram["caveats"])
    assert [p["working_set_bytes"] for p in found["curves"]["latency_random"]["points"]] == walk_sizes
    assert len(found["curves"]["latency"]["points"]) == len(sizes)


def test_transfer_bandwidth_is_read_from_the_largest_transfers():
    # A host copy: 3 us per call, 40 GB/s while the buffers sit in cache (up to 4 MiB), 12 GB/s beyond.
    sizes = [4 * KIB * 4**i for i in range(10)]                      # 4 KiB .. 1 GiB
    cases = [make_case(f"test_memcpy[{s}]", "transfer", 3e-6 + s / (40e9 if s <= 4 * MIB else 12e9),
                       transfers={"host": float(s)}, shape={"bytes": float(s), "kind": "host"}) for s in sizes]
    found = ceiling(build_profile([make_run(cases)], ["r.json"]), "transfer:host")
    assert found["value"] == pytest.approx(12e9, rel=0.01)
    assert any("median over the 3 transfer(s) of 64 MiB or more" in c for c in found["caveats"])


def test_points_that_missed_their_noise_target_do_not_make_a_level():
    sizes = np.geomspace(16 * KIB, 2048 * MIB, 30)
    local = staircase(sizes, [48 * KIB, 2 * MIB, 32 * MIB], [1.1e-9, 4.2e-9, 16e-9, 95e-9])
    local[-2:] *= 1.35                        # a disturbance during the last two cases
    cases = [make_case(f"test_chase[page-local-{int(s)}]", "chase", v * 1e6, accesses=1_000_000,
                       shape={"working_set_bytes": float(round(s)), "line_bytes": 64, "pattern": "page-local"},
                       noise_met=i < len(sizes) - 2)
             for i, (s, v) in enumerate(zip(sizes, local))]
    found = build_profile([make_run(cases)], ["r.json"])
    dram = ceiling(found, "latency:dram")
    assert dram["value"] == pytest.approx(95e-9, rel=0.05)
    assert any("2 point(s) of the latency curve missed their noise target" in c for c in dram["caveats"])
    points = found["curves"]["latency"]["points"]
    assert len(points) == 30 and [p["used"] for p in points[-3:]] == [True, False, False]
    # Disturbed points counted when too few steady ones would be left.
    for case in cases[:20]:
        case["flags"].append("noisy")
    assert all(p["used"] for p in build_profile([make_run(cases)], ["r.json"])["curves"]["latency"]["points"])


def test_a_step_past_dram_is_not_the_dram_latency():
    # Past a gigabyte the page tables miss the caches too: the walk's cost rises again.
    sizes = np.geomspace(16 * KIB, 2048 * MIB, 30)
    local = staircase(sizes, [48 * KIB, 2 * MIB, 32 * MIB], [1.1e-9, 4.2e-9, 16e-9, 95e-9])
    local[sizes > 1100 * MIB] *= 1.6
    cases = [make_case(f"test_chase[page-local-{int(s)}]", "chase", v * 1e6, accesses=1_000_000,
                       shape={"working_set_bytes": float(round(s)), "line_bytes": 64, "pattern": "page-local"})
             for s, v in zip(sizes, local)]
    found = build_profile([make_run(cases)], ["r.json"])
    assert ceiling(found, "latency:dram")["value"] == pytest.approx(95e-9, rel=0.05)
    assert [p["level"] for p in found["curves"]["latency"]["plateaus"]] == ["l1", "l2", "l3", "dram", None]


def test_chase_without_a_pattern_still_gives_the_levels(profile):
    assert "latency_random" not in profile["curves"]
    assert ceiling(profile, "latency:l3")["value"] == pytest.approx(16e-9, rel=0.05)


def test_transfer_fit_uses_pinned_cases(profile):
    h2d = ceiling(profile, "transfer:h2d")
    assert h2d["bandwidth"] == pytest.approx(25e9, rel=0.01) and h2d["value"] == h2d["bandwidth"]
    assert h2d["latency_s"] == pytest.approx(2e-6, rel=0.01)
    assert h2d["fit"]["points"] == 12 and h2d["fit"]["r2"] > 0.99
    assert h2d["spec"] == pytest.approx(32e9) and h2d["unit"] == "B/s"
    d2h = ceiling(profile, "transfer:d2h")
    assert d2h["bandwidth"] == pytest.approx(20e9) and d2h["latency_s"] is None
    assert any("one transfer size only" in c for c in d2h["caveats"])


def test_overheads_and_slowdowns(profile):
    assert ceiling(profile, "launch")["value"] == pytest.approx(2e-6)
    assert ceiling(profile, "dispatch")["value"] == pytest.approx(1.5e-6)
    # the framework's own figure, which the op-class model and CPU graph predictions read
    assert ceiling(profile, "dispatch:torch")["value"] == pytest.approx(1.5e-6)
    assert ceiling(profile, "wakeup")["unit"] == "s"
    # per page, not per call: what an op's fresh output pages cost (read back as an op cost)
    fresh = ceiling(profile, "fresh-page:torch")
    assert fresh["value"] == pytest.approx(1.7e-6) and fresh["unit"] == "s"
    assert fresh["evidence"]["best_case"] == "suites/test_synth.py::test_fresh_pages"
    assert "allocation" not in {c["name"] for c in profile["ceilings"]}
    from pytest_charz.models.ceilings_profile import read_op_costs
    assert read_op_costs(profile).fresh_page("torch-module") == pytest.approx(1.7e-6)
    slowdown = ceiling(profile, "slowdown:stream-vs-gemm")
    assert slowdown["value"] == pytest.approx(1.5) and slowdown["unit"] == "x" and slowdown["spec"] is None


def test_models_read_the_profile_as_measured_ceilings(profile):
    measured = Ceilings.from_profile(profile)
    assert measured.peak_flops["fp64"].value == pytest.approx(0.9e12)
    assert measured.bandwidth_bytes_per_s["dram"].value == pytest.approx(82e9)
    assert measured.link_bandwidth_bytes_per_s["h2d"].value == pytest.approx(25e9, rel=0.01)
    assert measured.link_latency_s["h2d"].value == pytest.approx(2e-6, rel=0.01)
    assert measured.launch_overhead_s.value == pytest.approx(2e-6)
    assert measured.compute_units.value == 2


def test_two_runs_take_the_median_and_report_spread():
    runs = [make_run(synthetic_cases(0.9e12, 0)), make_run(synthetic_cases(0.8e12, 1))]
    merged = build_profile(runs, ["a.json", "b.json"])
    fp64 = ceiling(merged, "flops:fp64")
    assert fp64["value"] == pytest.approx(0.85e12)
    assert fp64["evidence"]["values"] == pytest.approx([0.9e12, 0.8e12]) and fp64["evidence"]["runs"] == [0, 1]
    assert any(c.startswith("spread over 2 runs: 11.8%") for c in fp64["caveats"])
    assert "single run" not in fp64["caveats"]
    assert ceiling(merged, "gemm:fp64")["value"] == pytest.approx(0.8e12)
    assert any(c.startswith("spread over 2 runs: 0.0%") for c in ceiling(merged, "gemm:fp64")["caveats"])
    assert {p["run"] for p in merged["curves"]["bandwidth"]["points"]} == {0, 1}


def test_runs_of_different_targets_are_refused():
    with pytest.raises(CharzError, match=r"a\.json is of target 'testbox' but b\.json is of target 'otherbox'"):
        build_profile([make_run(synthetic_cases()), make_run(synthetic_cases(), "otherbox")], ["a.json", "b.json"])


def test_markdown_has_the_ceilings_table(profile):
    text = render_markdown(profile)
    assert "| ceiling | measured | spec | % of spec | evidence | caveats |" in text
    assert re.search(r"\| flops:fp64 \| 900 GFLOP/s \| 1 TFLOP/s \| 90\.0% \| 2 case\(s\), 20 samples", text)
    assert "### Transfers: h2d" in text and HOST_PEAK_SOURCE in text


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.references: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "srcset", "action", "data") and value:
                self.references.append(value)
            if name == "style" and value:
                self.references.extend(re.findall(r"url\(([^)]*)\)", value))


@pytest.fixture(scope="module")
def html_text(profile) -> str:
    pytest.importorskip("matplotlib")
    from pytest_charz.report.html import render_html

    return render_html(profile)


def test_html_is_self_contained_and_has_every_plot(html_text):
    from pytest_charz.report.plots import TITLES

    parser = _Links()
    parser.feed(html_text)
    assert not [r for r in parser.references if re.match(r"\s*(https?:)?//", r)]
    assert not re.findall(r"url\(\s*['\"]?(https?:)?//", html_text)
    assert "http://" not in html_text and "https://" not in html_text
    assert "svg" in parser.tags and "<table>" in html_text
    for key in ("roofline", "bandwidth", "latency", "transfer", "contention"):
        assert TITLES[key] in html_text
    assert TITLES["copy"] not in html_text          # no copy cases: no copy plot


def test_html_plots_only_the_curves_the_run_has():
    pytest.importorskip("matplotlib")
    from pytest_charz.report.html import render_html
    from pytest_charz.report.plots import TITLES

    only_gemm = [c for c in synthetic_cases() if c["work"]["op"] == "gemm"]
    text = render_html(build_profile([make_run(only_gemm)]))
    assert TITLES["roofline"] in text
    assert TITLES["latency"] not in text and TITLES["transfer"] not in text


def test_cli_writes_json_markdown_and_html_next_to_the_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = write_run(tmp_path / "run-1.json", run_dict(synthetic_cases()))
    assert cli.main(["profile", path]) == 0
    out = capsys.readouterr().out
    for suffix in (".json", ".md", ".html"):
        assert (tmp_path / f"run-1.profile{suffix}").is_file()
        assert f"run-1.profile{suffix}" in out
    assert "flops:fp64" in out and "900 GFLOP/s" in out
    assert load_profile(str(tmp_path / "run-1.profile.json"))["ceilings"]


def test_cli_out_dir_and_name(tmp_path):
    path = write_run(tmp_path / "run-2.json", run_dict(synthetic_cases()))
    assert profile_paths([path], str(tmp_path / "out"), "box") == {
        "json": str(tmp_path / "out" / "box.json"), "md": str(tmp_path / "out" / "box.md"),
        "html": str(tmp_path / "out" / "box.html")}


def test_without_matplotlib_json_and_markdown_are_still_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    path = write_run(tmp_path / "run-3.json", run_dict(synthetic_cases()))
    assert cli.main(["profile", path, "--name", "p"]) == 0
    assert (tmp_path / "p.json").is_file() and (tmp_path / "p.md").is_file()
    assert not (tmp_path / "p.html").exists()
    assert "pytest-charz[report]" in capsys.readouterr().err
    from pytest_charz.report.html import render_html

    with pytest.raises(MissingExtraError, match="report"):
        render_html(load_profile(str(tmp_path / "p.json")))


def test_unknown_run_version_is_a_format_error(tmp_path, capsys):
    path = write_run(tmp_path / "run-9.json", run_dict(synthetic_cases(), version=9))
    assert cli.main(["profile", path]) == 2
    assert "version 9 is not supported" in capsys.readouterr().err
    with pytest.raises(FormatError):
        from pytest_charz.report.profile_command import profile_command

        profile_command(type("Args", (), {"runs": [path], "out_dir": None, "name": None})())


def test_mixed_targets_on_the_command_line(tmp_path, capsys):
    a = write_run(tmp_path / "a.json", run_dict(synthetic_cases()))
    b = write_run(tmp_path / "b.json", run_dict(synthetic_cases(), "otherbox"))
    assert cli.main(["profile", a, b]) == 2
    err = capsys.readouterr().err
    assert "a.json" in err and "b.json" in err and "otherbox" in err


def test_profile_file_of_unknown_version_is_refused(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"version": 7, "kind": "charz-profile"}))
    with pytest.raises(FormatError, match="version 7"):
        load_profile(str(path))


def test_profile_and_models_quote_the_same_link_ceilings(profile):
    # One derivation of a spec's link figures: the profile's spec column is what models see.
    spec = TargetSpec.from_json(make_spec())
    datasheet = Ceilings.from_spec(spec)
    h2d = ceiling(profile, "transfer:h2d")
    assert h2d["spec"] == datasheet.link_bandwidth_bytes_per_s["h2d"].value
    assert h2d["spec_source"] == datasheet.link_bandwidth_bytes_per_s["h2d"].source == "PCIe 4.0 x16 per direction"
    assert h2d["spec_latency_s"] == pytest.approx(datasheet.link_latency_s["h2d"].value) == pytest.approx(1.5e-6)


def test_a_document_of_another_kind_is_not_a_profile(tmp_path):
    other = {"kind": "charz-baseline", "version": 1, "ceilings": []}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(other))
    with pytest.raises(FormatError, match="not a charz profile"):
        load_profile(str(path))
    with pytest.raises(FormatError, match="not a charz profile"):
        Ceilings.from_profile(other)


def test_op_class_cases_beside_the_sweeps_do_not_shape_the_memory_curves() -> None:
    # The op-class suite's copies (Tensor.clone over element counts) are `copy` cases without a
    # working set: a run with only those beside the read sweeps once crashed the copy curve.
    cases = [*synthetic_cases(),
             make_case("test_opclass_cpu[copy-1024]", "copy", 2e-6, bytes_={"l1": 8192},
                       launches=1, shape={"elements": 1024, "framework": "torch"})]
    built = build_profile([make_run(cases)], ["runs/one.json"])
    names = {c["name"] for c in built["ceilings"]}
    assert {"bandwidth:l1", "capacity:l2"} <= names
    assert "copy" not in built.get("curves", {})
