"""The target catalogue: loading, validation errors, name resolution, device matching, views."""
from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

from pytest_charz.devices.base import VisibleDevice
from pytest_charz.errors import SpecError, UsageError
from pytest_charz.targets.catalogue import (
    CATALOGUE_DIR,
    catalogue,
    load_catalogue,
    load_spec,
    match_visible,
    resolve,
)
from pytest_charz.targets.show import format_catalogue, format_spec
from pytest_charz.targets.spec import Figure, TargetSpec

DATA = Path(__file__).parent / "data" / "targets"
CATALOGUE_FILES = sorted(CATALOGUE_DIR.glob("*.toml"))
REQUIRED_IDS = {"h100-sxm", "h100-pcie", "h200", "a100-sxm-80gb", "l4", "mi300x", "mi250x",
                "tpu-v5e"}


def _figures(spec: TargetSpec) -> list[Figure]:
    found: list[Figure | None] = [spec.compute.units, *spec.compute.peak_flops.values(),
             *spec.compute.vector_peak_flops.values()]
    found += [spec.compute.clock_base_mhz, spec.compute.clock_boost_mhz]
    for level in spec.memory:
        found += [level.capacity_bytes, level.bandwidth_bytes_per_s, level.latency_ns]
    for link in ([spec.host_link] if spec.host_link else []) + list(spec.peer_links):
        found += [link.bandwidth_bytes_per_s, link.latency_us]
    if spec.power:
        found += [spec.power.tdp_w, spec.power.idle_w]
    return [figure for figure in found if figure is not None]


def test_the_catalogue_holds_the_required_targets() -> None:
    assert REQUIRED_IDS <= set(catalogue())
    assert {path.stem for path in CATALOGUE_FILES} == set(catalogue())


@pytest.mark.parametrize("path", CATALOGUE_FILES, ids=lambda path: path.stem)
def test_every_catalogue_file_loads_with_cited_positive_figures(path: Path) -> None:
    spec = load_spec(path)
    assert spec.id == path.stem
    assert spec.origin == str(path)
    for figure in _figures(spec):
        assert figure.value > 0
        assert figure.source in spec.sources
    # Every target says how to recognise it and carries its main memory.
    assert spec.identity.match_name
    dram = spec.level("dram")
    assert dram is not None and dram.capacity_bytes and dram.bandwidth_bytes_per_s
    # A matrix (dense) peak is never below the vector peak of the same dtype.
    for dtype, vector in spec.compute.vector_peak_flops.items():
        dense = spec.peak(dtype)
        assert dense is None or dense >= vector.value


def test_h100_sxm_figures_are_the_dense_datasheet_ones() -> None:
    spec = resolve("h100-sxm")
    assert spec.compute.units.value == 132
    assert spec.peak("fp64") == pytest.approx(67e12)
    assert spec.peak("fp32") == pytest.approx(67e12)
    assert spec.peak("tf32") == pytest.approx(494.5e12)
    assert spec.peak("bf16") == pytest.approx(989.5e12)
    assert spec.peak("fp8") == pytest.approx(1979e12)
    assert spec.bandwidth("dram") == pytest.approx(3.35e12)
    l2 = spec.level("l2")
    assert l2 is not None and l2.capacity_bytes is not None
    assert l2.capacity_bytes.value == pytest.approx(50 * 2**20)
    assert spec.host_link is not None
    assert spec.host_link.bandwidth_bytes_per_s.value == pytest.approx(64e9)
    nvlink = spec.peer_links[0]
    # 900 GB/s total over both directions.
    assert 2 * nvlink.count * nvlink.bandwidth_bytes_per_s.value == pytest.approx(900e9)


def test_h200_differs_from_h100_in_memory_only() -> None:
    h100, h200 = resolve("h100-sxm"), resolve("h200")
    assert dict(h200.compute.peak_flops).keys() == dict(h100.compute.peak_flops).keys()
    for dtype in h100.compute.peak_flops:
        assert h200.peak(dtype) == pytest.approx(h100.peak(dtype))
    assert h200.bandwidth("dram") == pytest.approx(4.8e12)
    assert h200.bandwidth("dram") > h100.bandwidth("dram")  # type: ignore[operator]


@pytest.mark.parametrize(("name", "target_id"), [
    ("mi300", "mi300x"), ("MI300X", "mi300x"), ("h100", "h100-sxm"), (" H100-SXM ", "h100-sxm"),
    ("h100-pcie", "h100-pcie"), ("A100", "a100-sxm-80gb"), ("v5e", "tpu-v5e"), ("H200", "h200"),
    ("mi250x-gcd", "mi250x"),
])
def test_names_and_aliases_resolve_case_insensitively(name: str, target_id: str) -> None:
    assert resolve(name).id == target_id


@pytest.mark.parametrize("name", ["cpu", "host", "CPU"])
def test_cpu_and_host_resolve_to_the_derived_host_spec(name: str) -> None:
    spec = resolve(name)
    assert spec.id == "cpu"
    assert spec.identity.kind == "cpu"
    assert spec.origin == "derived at run time"


def test_an_unknown_name_lists_the_known_ids_and_the_nearest() -> None:
    with pytest.raises(UsageError) as caught:
        resolve("mi30x")
    message = str(caught.value)
    assert "'mi30x'" in message
    for target_id in [*REQUIRED_IDS, "cpu"]:
        assert target_id in message
    assert message.endswith("did you mean 'mi300x'?")


def test_an_alias_typo_suggests_the_target_id() -> None:
    with pytest.raises(UsageError, match=r"did you mean 'h100-sxm'\?"):
        resolve("h10")


def test_a_name_far_from_every_target_gets_no_suggestion() -> None:
    with pytest.raises(UsageError) as caught:
        resolve("qqqqqqqq")
    assert "did you mean" not in str(caught.value)
    assert "known targets: cpu, " in str(caught.value)


def test_the_minimal_test_file_is_valid() -> None:
    spec = load_spec(DATA / "minimal.toml")
    assert spec.id == "toy-gpu"
    assert spec.peak("bf16") == pytest.approx(1e12)
    assert spec.host_link is None and spec.power is None and spec.peer_links == ()


@pytest.mark.parametrize(("name", "field", "value"), [
    ("bad_negative_peak", "compute.peak_flops.bf16.value", "-500000000000.0"),
    ("bad_zero_capacity", "memory[0].capacity_bytes.value", "got 0"),
    ("bad_unknown_source", "compute.units.source", "'brochure'"),
    ("bad_unknown_dtype", "compute.peak_flops.fp12", "'value': 1000000000000.0"),
    ("bad_unknown_field", "compute.colour", "'green'"),
    ("bad_missing_units", "compute.units is missing", ""),
    ("bad_wrong_type", "compute.units.value", "'four'"),
    ("bad_level_name", "memory[0].name", "'l4'"),
    ("bad_kind", "identity.kind", "'fpga'"),
    ("bad_regex", "identity.match_name[0]", "'(Toy GPU'"),
    ("bad_syntax", "is not valid TOML", ""),
])
def test_a_malformed_file_names_file_field_and_value(name: str, field: str, value: str) -> None:
    path = DATA / f"{name}.toml"
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert field in message
    assert value in message


def test_a_missing_file_is_a_spec_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="nowhere.toml: cannot be read"):
        load_spec(tmp_path / "nowhere.toml")


def test_a_name_used_by_two_files_is_rejected() -> None:
    with pytest.raises(SpecError) as caught:
        load_catalogue(DATA / "duplicate")
    message = str(caught.value)
    assert "'toy'" in message and "toy-a.toml" in message and "toy-b.toml" in message


def test_a_target_may_not_claim_the_host_names(tmp_path: Path) -> None:
    text = (DATA / "minimal.toml").read_text().replace('aliases = ["toy"]', 'aliases = ["host"]')
    (tmp_path / "toy.toml").write_text(text)
    with pytest.raises(SpecError, match=r"identity\.aliases\[0\].*'host'"):
        load_spec(tmp_path / "toy.toml")


@pytest.mark.parametrize(("backend", "name", "pci", "expected"), [
    ("cuda", "NVIDIA H100 80GB HBM3", None, "h100-sxm"),
    ("cuda", "NVIDIA H100 PCIe", None, "h100-pcie"),
    ("cuda", "NVIDIA H200", None, "h200"),
    ("cuda", "GH100 [H200 SXM 141GB]", None, "h200"),
    ("cuda", "GH100 [H100 SXM5 80GB]", None, "h100-sxm"),
    ("cuda", "NVIDIA H100 NVL", None, None),
    ("cuda", "NVIDIA H200 NVL", None, None),
    ("cuda", "NVIDIA GH200 480GB", None, None),
    ("cuda", "NVIDIA A100-SXM4-80GB", None, "a100-sxm-80gb"),
    ("cuda", "NVIDIA A100-SXM4-40GB", None, None),
    ("cuda", "NVIDIA L4", None, "l4"),
    ("cuda", "NVIDIA L40S", None, None),
    ("rocm", "AMD Instinct MI300X", None, "mi300x"),
    ("rocm", "Aqua Vanjaram [Instinct MI300X VF]", None, "mi300x"),
    ("rocm", "AMD Instinct MI300A", None, None),
    ("rocm", "AMD Instinct MI250X", None, "mi250x"),
    ("tpu", "TPU v5 lite", None, "tpu-v5e"),
    ("tpu", "TPU v5", None, None),
    # The backend must agree: a CUDA name seen through ROCm matches nothing.
    ("rocm", "NVIDIA H100 PCIe", None, None),
    # A PCI device id decides when the name says nothing, in NVML's and lspci's spellings.
    ("cuda", "NVIDIA Graphics Device", "0x233010DE", "h100-sxm"),
    ("cuda", "NVIDIA Graphics Device", "10de:2335", "h200"),
    ("cuda", "NVIDIA Graphics Device", "2331", "h100-pcie"),
    ("rocm", "AMD Instinct", "0x74a1", "mi300x"),
    # An unknown id falls back to the name.
    ("cuda", "NVIDIA H100 PCIe", "0x999910DE", "h100-pcie"),
])
def test_match_visible_tells_the_products_apart(backend: str, name: str, pci: str | None,
                                                expected: str | None) -> None:
    found = match_visible(VisibleDevice(backend=backend, index=0, name=name, pci_device_id=pci))
    assert (found.id if found else None) == expected


def test_a_cpu_device_matches_the_host_spec() -> None:
    found = match_visible(VisibleDevice(backend="cpu", index=0, name="whatever"))
    assert found is not None and found.id == "cpu"


def test_overlapping_match_rules_are_reported() -> None:
    toy = load_spec(DATA / "minimal.toml")
    twin = dataclasses.replace(toy, identity=dataclasses.replace(toy.identity, id="toy-twin",
                                                                 match_name=(r"\bToy\b",)))
    with pytest.raises(SpecError, match="toy-gpu, toy-twin"):
        match_visible(VisibleDevice(backend="cuda", index=0, name="Toy GPU"),
                      {"toy-gpu": toy, "toy-twin": twin})


def _row(table: str, target_id: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(target_id + " "))


def test_format_catalogue_lists_peaks_and_memory_per_target() -> None:
    table = format_catalogue(catalogue())
    for target_id in REQUIRED_IDS:
        assert _row(table, target_id)
    h100 = _row(table, "h100-sxm").split()
    assert ["989.5", "67.0", "67.0", "3.35", "80"] == h100[-5:]
    assert _row(table, "l4").split()[-3] == "-"      # no FP64 figure for the L4
    assert "bf16 TFLOP/s" in table.splitlines()[0]


def test_format_catalogue_works_without_tabulate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tabulate", None)  # makes `import tabulate` fail
    table = format_catalogue([resolve("mi300x"), resolve("l4")])
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["id", "name"]
    assert set(lines[1]) <= {"-", " "}
    assert _row(table, "mi300x").split()[-5:] == ["1,307.4", "163.4", "163.4", "5.30", "192"]


@pytest.mark.parametrize("target_id", sorted(REQUIRED_IDS))
def test_format_spec_shows_every_figure_with_its_source(target_id: str) -> None:
    spec = resolve(target_id)
    text = format_spec(spec)
    for key, citation in spec.sources.items():
        assert f"{key}: {citation}" in text
    for figure in _figures(spec):
        assert f"[{figure.source}]" in text
    for dtype in spec.compute.peak_flops:
        assert re.search(rf"dense peak {dtype}\s+[\d.,]+ [PTG](FLOP|OP)/s", text)


def test_format_spec_renders_units() -> None:
    text = format_spec(resolve("h100-sxm"))
    assert "989.5 TFLOP/s  [h100-datasheet]" in text
    assert "1.979 POP/s" in text                  # int8 counted in operations
    assert "80 GiB  [h100-datasheet]" in text
    assert "3.35 TB/s" in text
    assert "1980 MHz  [h100-clock]" in text
    assert "700 W  [h100-datasheet]" in text


@pytest.mark.parametrize("name", ["nope", "zzzzqqq", "gpu0"])
def test_an_unknown_name_with_nothing_close_gets_no_arbitrary_suggestion(name: str) -> None:
    from pytest_charz.errors import UsageError
    from pytest_charz.targets.catalogue import resolve

    with pytest.raises(UsageError) as caught:
        resolve(name)
    message = str(caught.value)
    assert re.search(r"known targets: cpu, .*mi300x.*, tpu-v5e$", message), message
    assert "did you mean" not in message and "nearest" not in message


@pytest.mark.parametrize(("name", "suggested"), [("tpu", "'tpu-v5e'"), ("mi30", "'mi300x'"),
                                                 ("h20", "'h200'"), ("l40", "'l4'")])
def test_a_close_name_gets_the_close_targets(name: str, suggested: str) -> None:
    from pytest_charz.errors import UsageError
    from pytest_charz.targets.catalogue import resolve

    with pytest.raises(UsageError) as caught:
        resolve(name)
    assert suggested in str(caught.value).rsplit("did you mean ", 1)[1]
