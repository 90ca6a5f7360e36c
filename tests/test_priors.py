"""Spec-only priors: every kind of Work is covered on every catalogue target from the datasheet
and its cited priors; each prior is marked; measured figures win over priors."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from pytest_charz import predict
from pytest_charz.errors import SpecError
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.targets.catalogue import catalogue, load_spec, resolve
from pytest_charz.targets.host import DRAM_BYTES_PER_S_PER_CPU, HostTexts, derive_host_spec
from pytest_charz.targets.priors import PRIOR_MARK
from pytest_charz.targets.spec import TargetSpec
from pytest_charz.work import Collective, Work

CATALOGUE = Path(__file__).resolve().parent.parent / "pytest_charz" / "targets" / "catalogue"
RECORDED = Path(__file__).parent / "data" / "host" / "xeon-amx-2core"
# The one target whose priors are incomplete: Google documents no host interface of a TPU v5e
# chip and no memory latency, and no published measurement of either was found; these Work
# kinds stay uncovered there (and say so) rather than being guessed.
KNOWN_GAPS = {("tpu-v5e", "h2d"), ("tpu-v5e", "d2h"), ("tpu-v5e", "accesses:dram")}


def works_of_every_kind(spec: TargetSpec) -> dict[str, Work]:
    """One Work per kind the Work type knows, sized for ``spec``."""
    works: dict[str, Work] = {}
    for dtype in spec.compute.peak_flops:
        works[f"flops:{dtype}"] = Work(1e9, dtype=dtype, op="elementwise")
        works[f"gemm:{dtype}"] = Work(2.0 * 4096**3, 3 * 2.0 * 4096**2, dtype=dtype, op="gemm",
                                      shape={"m": 4096, "n": 4096, "k": 4096})
    for level in spec.memory:
        works[f"bytes:{level.name}"] = Work(bytes={level.name: 1e8})
        if level.capacity_bytes is not None:
            size = level.capacity_bytes.value / 2
            works[f"accesses:{level.name}"] = Work(accesses=1000, shape={"working_set_bytes": size})
    works["accesses:dram"] = Work(accesses=1000, shape={"working_set_bytes": 1e15})
    works["launches"] = Work(launches=10)
    for kind in ("h2d", "d2h", "d2d", "peer"):
        works[kind] = Work(transfers={kind: 1e8})
    works["all-reduce"] = Work(collectives=(Collective("all-reduce", 1e8, 8),))
    return works


@pytest.mark.parametrize("target", sorted(catalogue()))
def test_every_kind_of_work_is_covered_from_the_spec_alone(target: str) -> None:
    spec = resolve(target)
    uncovered = {}
    for kind, work in works_of_every_kind(spec).items():
        prediction = predict(work, target=target)
        if not prediction.covered:
            uncovered[(target, kind)] = prediction.reason
        else:
            assert prediction.time_s > 0 and math.isfinite(prediction.time_s), (target, kind)
    assert set(uncovered) == {gap for gap in KNOWN_GAPS if gap[0] == target}, uncovered


def test_a_launch_is_covered_by_a_marked_prior_and_a_measured_figure_wins() -> None:
    work = Work(launches=1)
    prediction = predict(work, target="h100")
    assert prediction.covered and prediction.breakdown["launch"] == pytest.approx(2.5e-6)
    spec_ceilings = Ceilings.from_spec(resolve("h100"))
    used = spec_ceilings.priors_used(work)
    assert list(used) == ["launch"] and used["launch"].startswith(PRIOR_MARK)
    assert spec_ceilings.launch_overhead_s is None        # what was measured stays apart
    profile = {"kind": "charz-profile", "version": 1, "target": {"id": "h100-sxm"},
               "ceilings": [{"name": "launch", "value": 4.0, "unit": "us", "source": "runtime suite"}]}
    measured = Ceilings.from_profile(profile).filled_from(spec_ceilings)
    assert measured.launch_overhead() == pytest.approx(4e-6) and measured.priors_used(work) == {}


def test_gemm_and_dram_fractions_scale_the_datasheet_and_say_so() -> None:
    spec = resolve("h100-sxm")
    datasheet, with_priors = Ceilings.from_spec(spec, priors="none"), Ceilings.from_spec(spec)
    assert with_priors.peak("bf16", "gemm") == pytest.approx(0.845 * datasheet.peak("bf16", "gemm"))
    assert with_priors.bandwidth("dram") == pytest.approx(0.829 * 3.35e12)
    assert with_priors.link_bandwidth("d2d") == pytest.approx(0.829 * 3.35e12 / 2)
    assert "9.895e+14" in with_priors.peak_flops["bf16"].source and "prior-gemm-hopper" in with_priors.peak_flops["bf16"].source
    # Elementwise work is not held to a GEMM's fraction: fp32 (no vector figure) keeps the datasheet.
    assert with_priors.peak("fp32", "elementwise") == pytest.approx(datasheet.peak("fp32"))
    assert with_priors.peak("fp8", "elementwise") == pytest.approx(datasheet.peak("fp8"))
    used = with_priors.priors_used(Work(2e12, 1e9, dtype="bf16", op="gemm", shape={"m": 1, "n": 1, "k": 1}))
    assert set(used) == {"flops:bf16", "bandwidth:dram"}
    assert datasheet.launch_overhead() is None and datasheet.priors_used(Work(launches=1)) == {}


def test_spec_roofline_stays_the_datasheet_roofline_with_only_missing_figures_filled() -> None:
    gemm = Work(2.0 * 8192**3, dtype="bf16", op="gemm", shape={"m": 8192, "n": 8192, "k": 8192})
    roofline = predict(gemm, target="h100-sxm", model="spec-roofline")
    assert roofline.time_s == pytest.approx(2.0 * 8192**3 / 989.5e12)
    fraction = resolve("h100-sxm").priors.efficiency["gemm_bf16"].value  # type: ignore[union-attr]
    assert predict(gemm, target="h100-sxm").time_s >= roofline.time_s / fraction
    missing = Ceilings.from_spec(resolve("h100-sxm"), priors="missing")
    assert missing.launch_overhead() == pytest.approx(2.5e-6)
    assert missing.bandwidth("dram") == pytest.approx(3.35e12)


def test_a_pcie_card_without_peer_links_gets_its_peer_path_from_a_prior() -> None:
    ceilings = Ceilings.from_spec(resolve("l4"))
    assert ceilings.link_bandwidth("peer") == pytest.approx(32e9)
    assert ceilings.link_bandwidth_bytes_per_s["peer"].source.startswith(PRIOR_MARK)


def recorded_host() -> TargetSpec:
    indexes = tuple(dict(line.split("=", 1) for line in path.read_text().splitlines())
                    for path in sorted(RECORDED.glob("cache-index*")))
    return derive_host_spec(HostTexts(cpuinfo=(RECORDED / "cpuinfo").read_text(),
                                      meminfo=(RECORDED / "meminfo").read_text(),
                                      cache_indexes=indexes, machine="x86_64"))


def test_the_host_cpu_gets_a_dram_and_a_dispatch_prior() -> None:
    spec = recorded_host()
    ceilings = Ceilings.from_spec(spec)
    assert ceilings.bandwidth("dram") == pytest.approx(2 * DRAM_BYTES_PER_S_PER_CPU)
    assert ceilings.bandwidth_bytes_per_s["dram"].source.startswith(PRIOR_MARK)
    assert ceilings.link_bandwidth("host") == pytest.approx(DRAM_BYTES_PER_S_PER_CPU)
    assert ceilings.launch_overhead() == pytest.approx(10e-6)
    # spec-roofline now covers memory-bound work on a CPU (it covered nothing without DRAM).
    from pytest_charz.models.roofline import Roofline

    stream = Roofline().predict(Work(bytes=1e9), Ceilings.from_spec(spec, priors="missing"))
    assert stream.covered and stream.bound == "memory:dram"
    assert Ceilings.from_spec(spec, priors="none").bandwidth("dram") is None


def test_priors_survive_the_run_file_round_trip() -> None:
    spec = resolve("mi300x")
    again = TargetSpec.from_json(spec.to_json())
    assert again.priors == spec.priors
    assert Ceilings.from_spec(again).to_json() == Ceilings.from_spec(spec).to_json()
    host = recorded_host()
    assert TargetSpec.from_json(host.to_json()).priors == host.priors


def test_a_ceilings_file_keeps_its_launch_prior_tile_time_and_architecture() -> None:
    ceilings = Ceilings.from_spec(resolve("a100"))
    again = Ceilings.from_json(ceilings.to_json())
    assert again.launch_prior_s == ceilings.launch_prior_s
    assert again.gemm_tile_s == ceilings.gemm_tile_s and again.gemm_tile("fp16") > 0
    assert again.architecture == "Ampere" and again == ceilings
    bare = Ceilings.from_spec(resolve("a100"), priors="none").to_json()
    assert "launch_prior_s" not in bare and "gemm_tile_s" not in bare   # only with priors
    assert "gemm_tile_s" not in Ceilings.from_spec(resolve("a100"), priors="missing").to_json()
    # written before the tile time and the architecture: read as having neither
    old = {key: value for key, value in ceilings.to_json().items() if key not in ("gemm_tile_s", "architecture")}
    assert Ceilings.from_json(old).gemm_tile("fp16") == 0.0 and Ceilings.from_json(old).architecture == ""


@pytest.mark.parametrize("edit, message", [
    ("gemm_bf16 = { value = 0.845,", "gemm_bf16 = { value = 1.2,"),
    ("gemm_bf16 = { value = 0.845,", "gemm_bf61 = { value = 0.845,"),
    ('launch_us = { value = 2.5, source = "prior-launch" }', 'launch_us = { value = 2.5, source = "nowhere" }'),
])
def test_a_bad_prior_in_a_catalogue_file_names_the_field(tmp_path: Path, edit: str, message: str) -> None:
    text = (CATALOGUE / "h100-sxm.toml").read_text()
    assert edit in text
    path = tmp_path / "h100-sxm.toml"
    path.write_text(text.replace(edit, message, 1))
    with pytest.raises(SpecError, match=r"priors\.(efficiency\.gemm_b|launch_us)"):
        load_spec(path)


def test_targets_without_priors_still_load_and_predict_as_before() -> None:
    spec = dataclasses.replace(resolve("h100-sxm"), priors=None)
    assert Ceilings.from_spec(spec).to_json() == Ceilings.from_spec(resolve("h100-sxm"), priors="none").to_json()


def test_charz_targets_show_lists_the_priors_with_their_sources() -> None:
    from pytest_charz.targets.show import format_spec

    text = format_spec(resolve("mi300x"))
    assert "Priors" in text and "achievable gemm_bf16 60.4%  [prior-gemm-cdna3]" in text
    assert "launch             2.5 us  [prior-launch]" in text
    assert "prior-gemm-cdna3: Achievable GEMM fraction fitted on" in text
