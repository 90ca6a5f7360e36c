"""Energy: the per-target coefficients (every one sourced), dynamic and static energy, joules
per token, and the power cap that lowers the clock."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_charz.errors import SpecError
from pytest_charz.sim import Machine, SimOptions, simulate_graph, simulate_work
from pytest_charz.targets.catalogue import catalogue, resolve
from pytest_charz.targets.energy import ENERGY_DIR, energy_coefficients, load_energy_file
from pytest_charz.work import Work
from pytest_charz.workloads.builders import build


@pytest.mark.parametrize("target", sorted(catalogue()))
def test_every_catalogue_target_has_sourced_coefficients(target: str) -> None:
    spec = resolve(target)
    coefficients = energy_coefficients(spec)
    everything = [*coefficients.joules_per_flop.values(), *coefficients.joules_per_byte.values(),
                  *coefficients.joules_per_link_byte.values(), coefficients.idle_w, coefficients.tdp_w]
    for coefficient in everything:
        if coefficient is not None:
            assert coefficient.value >= 0 and len(coefficient.source) > 20
    assert "dram" in coefficients.joules_per_byte
    if coefficients.tdp_w is not None and coefficients.idle_w is not None:
        # A device at its bf16 (or first) peak with DRAM at full bandwidth draws exactly its TDP.
        machine = Machine.from_spec(spec)
        dtype = "bf16" if "bf16" in coefficients.joules_per_flop else next(iter(coefficients.joules_per_flop))
        dram = spec.level("dram")
        assert dram is not None and dram.bandwidth_bytes_per_s is not None
        full = (coefficients.idle_w.value + spec.compute.peak_flops[dtype].value * coefficients.joules_per_flop[dtype].value
                + dram.bandwidth_bytes_per_s.value * coefficients.joules_per_byte["dram"].value)
        assert full == pytest.approx(coefficients.tdp_w.value)
        assert machine.power_cap_w == coefficients.tdp_w.value
        assert "derived" in coefficients.joules_per_flop[dtype].source


def test_energy_files_cover_the_catalogue_and_nothing_else() -> None:
    assert {path.stem for path in ENERGY_DIR.glob("*.toml")} == set(catalogue())


def test_a_malformed_energy_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('target = "x"\n[sources]\na = "A citation"\n[memory]\n'
                    'dram = { value = -3, source = "a", how = "made up" }\n[links]\n')
    with pytest.raises(SpecError, match=r"memory\.dram\.value must be a non-negative number"):
        load_energy_file(path)
    path.write_text('target = "x"\n[sources]\na = "A citation"\n[memory]\n'
                    'dram = { value = 3, source = "b", how = "made up" }\n[links]\n')
    with pytest.raises(SpecError, match=r"memory\.dram\.source must be a key of \[sources\]"):
        load_energy_file(path)


def test_energy_is_dynamic_work_plus_static_power() -> None:
    machine = Machine.from_spec(resolve("h100-sxm"))
    energy = machine.energy
    assert energy is not None and machine.idle_power_w is not None
    moved = 1e9
    result = simulate_work(Work(bytes=moved, op="stream"), machine)
    expected = moved * energy.joules_per_byte["dram"].value + machine.idle_power_w * result.latency_s
    assert result.energy_j == pytest.approx(expected)
    assert result.average_power_w == pytest.approx(expected / result.latency_s)
    twice = simulate_work(Work(bytes=2 * moved, op="stream"), machine)
    assert twice.energy_j == pytest.approx(2 * result.energy_j)


def test_joules_per_token_of_a_decode_step_over_its_ranks() -> None:
    machine = Machine.from_spec(resolve("h100-sxm"))
    graph = build("llama-2-7b", "decode", batch=4, context=1024, num_layers=2, tp=2)
    result = simulate_graph(graph, machine)
    assert result.devices == 2 and result.tokens_per_s == pytest.approx(4 / result.latency_s)
    assert result.joules_per_token == pytest.approx(result.energy_j / 4)
    assert sum(result.energy_breakdown_j.values()) == pytest.approx(result.energy_j)
    assert result.energy_breakdown_j["static"] == pytest.approx(2 * 105 * result.latency_s)


def test_a_power_cap_lowers_the_clock_of_a_compute_bound_run() -> None:
    machine = Machine.from_spec(resolve("h100-sxm"))
    gemm = Work(flops=2.0 * 8192**3, bytes=3 * 2 * 8192**2, dtype="bf16", op="gemm",
                shape={"m": 8192, "n": 8192, "k": 8192})
    free = simulate_work(gemm, machine)
    assert free.average_power_w < 700 * 1.01
    capped = simulate_work(gemm, machine.with_params({"power_cap_w": 350}))
    assert capped.clock_mhz < machine.clock_mhz and capped.latency_s > free.latency_s
    assert capped.average_power_w <= 350 * 1.01
    stream = Work(bytes=1e9, op="stream")
    assert simulate_work(stream, machine.with_params({"power_cap_w": 350})).latency_s == \
        pytest.approx(simulate_work(stream, machine).latency_s)


def test_a_graph_under_a_power_cap_says_so() -> None:
    machine = Machine.from_spec(resolve("h100-sxm")).with_params({"power_cap_w": 300})
    result = simulate_graph(build("llama-2-7b", "prefill", batch=4, seq=2048, num_layers=2), machine,
                            SimOptions(host_dispatch_s=1e-6))
    assert result.clock_mhz < 1980 and any("power cap" in note for note in result.notes)
    assert result.average_power_w / result.devices <= 300 * 1.01


def test_a_target_without_power_figures_reports_unknown_energy() -> None:
    result = simulate_work(Work(bytes=1e9, op="stream"), Machine.from_spec(resolve("tpu-v5e")))
    assert math.isnan(result.energy_j)
    document = result.to_json()
    assert document["energy_j"] is None and document["kind"] == "charz-sim-result"
    json.dumps(document, allow_nan=False)
