"""Which CPU a host spec, a run, a baseline, a calibration and a comparison are of.

Three AMD generations that a virtual machine names alike ("AMD EPYC") must never share
references, calibrations or an unqualified comparison. The CPUs here are the recorded Xeon text
(``data/host/``), /proc/cpuinfo texts written from the published cpuid values and sysfs cache
sizes of Zen 3, 4 and 5, and the three recorded runs (``data/runs/``), written before the CPU
identity existed; nothing depends on the CPU the tests run on.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_host import cpuinfo_text, recorded_texts

from pytest_charz.calibration.file import calibrate
from pytest_charz.errors import UsageError
from pytest_charz.measure.provenance import collect, cpu_record
from pytest_charz.prediction import predict
from pytest_charz.profile import build_profile
from pytest_charz.records import Run
from pytest_charz.report.compare import compare_profiles, profile_identity
from pytest_charz.report.compare_command import render_markdown
from pytest_charz.run import load_run
from pytest_charz.store import run_target_key, store_target_key
from pytest_charz.targets.host import HostTexts, derive_host_spec, host_identity, read_host_identity
from pytest_charz.targets.identity import (
    cpu_fingerprint,
    cpu_label,
    fingerprint_of,
    identity_differences,
    identity_document,
    split_cpu_label,
)
from pytest_charz.targets.spec import TargetSpec
from pytest_charz.work import Work

DATA = Path(__file__).parent / "data"
RUNS = {"zen3": DATA / "runs" / "amd-epyc-zen3-kvm-2vcpu.run.json.gz",
        "zen4": DATA / "runs" / "amd-epyc-zen4-kvm-2vcpu-workloads.run.json.gz",
        "zen5": DATA / "runs" / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"}
ZEN4_PROFILE = DATA / "profiles" / "amd-epyc-zen4-kvm-2vcpu.profile.json.gz"
# the keys the recorded runs have had since their spec's fingerprint was defined: moving them
# would orphan every reference stored under them
RECORDED_KEYS = {"zen3": "cpu-amd-epyc-802ea440", "zen4": "cpu-amd-epyc-5bf3ba5b", "zen5": "cpu-amd-epyc-631a3fa7"}
KEY = re.compile(r"cpu-amd-epyc-[0-9a-f]{8}")
BASE_FLAGS = "fpu sse sse2 ssse3 sse4_1 sse4_2 aes avx avx2 fma f16c bmi1 bmi2"
# family, model, stepping, extra flags, L1d, L2, L3 (sysfs sizes) of each generation's server part
GENERATIONS = {
    "zen3": (25, 0x01, 1, "", "32K", "512K", "32768K"),
    "zen4": (25, 0x11, 1, "avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni", "32K", "1024K", "32768K"),
    "zen5": (26, 0x02, 1, "avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni avx_vnni",
             "48K", "1024K", "32768K"),
}
GEMM = Work(flops=2.0 * 1024 ** 3, bytes=3 * 4 * 1024 ** 2, op="gemm", shape={"m": 1024, "n": 1024, "k": 1024})


def amd_texts(generation: str, **changes: Any) -> HostTexts:
    """A 2-core guest of ``generation`` whose /proc/cpuinfo calls it "AMD EPYC", as the runs' did."""
    family, model, stepping, extra, l1, l2, l3 = GENERATIONS[generation]
    text = cpuinfo_text("AuthenticAMD", "AMD EPYC", family, model, f"{BASE_FLAGS} {extra}", stepping=stepping)
    caches = ({"level": "1", "type": "Data", "size": l1, "shared_cpu_list": "0"},
              {"level": "1", "type": "Instruction", "size": "32K", "shared_cpu_list": "0"},
              {"level": "2", "type": "Unified", "size": l2, "shared_cpu_list": "0"},
              {"level": "3", "type": "Unified", "size": l3, "shared_cpu_list": "0-1"})
    return dataclasses.replace(HostTexts(cpuinfo=text, cache_indexes=caches, machine="x86_64"), **changes)


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    return {name: load_run(str(path)) for name, path in RUNS.items()}


# -- the host spec's identity and its key -------------------------------------------------------


def test_three_generations_named_alike_get_three_keys() -> None:
    specs = {name: derive_host_spec(amd_texts(name)) for name in GENERATIONS}
    assert {spec.identity.name for spec in specs.values()} == {"AMD EPYC"}
    keys = {name: store_target_key(spec) for name, spec in specs.items()}
    assert all(KEY.fullmatch(key) for key in keys.values()), keys
    assert len(set(keys.values())) == 3
    zen4 = specs["zen4"].identity.cpu
    assert zen4 is not None and (zen4.family, zen4.model, zen4.stepping) == (25, 0x11, 1)
    assert zen4.features == ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni")
    assert zen4.native_dtypes == ("bf16", "int8") and dict(zen4.cache_bytes)["l2"] == 1024 * 1024


def test_the_key_is_stable_and_moves_with_the_cpu_not_with_its_clock() -> None:
    key = store_target_key(derive_host_spec(recorded_texts()))
    assert key == "cpu-intel-r-xeon-r-processor-04a5fcc5"     # fixed: a new version must find its references
    for same in (recorded_texts(cpufreq_max_khz="3500000"), recorded_texts(clock_override_mhz="3000"),
                 recorded_texts(measured_clock_mhz=3848.0)):
        assert store_target_key(derive_host_spec(same)) == key
    assert store_target_key(derive_host_spec(recorded_texts(), fma_units_override="1")) == key
    stepping_2 = recorded_texts(cpuinfo=recorded_texts().cpuinfo.replace("stepping\t: 1", "stepping\t: 2"))
    assert store_target_key(derive_host_spec(stepping_2)) != key
    one_core = amd_texts("zen4", cpuinfo=cpuinfo_text("AuthenticAMD", "AMD EPYC", 25, 0x11, BASE_FLAGS, cores=1,
                                                         stepping=1))
    assert store_target_key(derive_host_spec(one_core)) != store_target_key(derive_host_spec(amd_texts("zen4")))


def test_the_identity_round_trips_and_an_old_spec_loads_without_one() -> None:
    spec = derive_host_spec(recorded_texts())
    again = TargetSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again == spec and again.identity.cpu == spec.identity.cpu
    assert store_target_key(again) == store_target_key(spec)
    old = spec.to_json()
    del old["identity"]["cpu"]
    loaded = TargetSpec.from_json(old)
    assert loaded.identity.cpu is None
    # an old spec is fingerprinted from what it recorded: not the identity's fingerprint, still stable
    assert store_target_key(loaded).startswith("cpu-intel-r-xeon-r-processor-")
    assert store_target_key(loaded) != store_target_key(spec)
    assert store_target_key(loaded) == store_target_key(TargetSpec.from_json(old))


def test_the_recorded_runs_keep_apart_and_their_keys_agree(runs: dict[str, Run]) -> None:
    for name, run in runs.items():
        assert run.target.spec is not None and run.target.spec.identity.cpu is None  # recorded before it
        with gzip.open(RUNS[name], "rt", encoding="utf-8") as handle:
            raw = json.load(handle)
        assert run_target_key(run) == run_target_key(raw) == store_target_key(run.target.spec) == RECORDED_KEYS[name]


def test_a_run_records_its_host_identity_and_key(runs: dict[str, Run]) -> None:
    spec = derive_host_spec(amd_texts("zen5"))
    run = dataclasses.replace(runs["zen5"], target=dataclasses.replace(runs["zen5"].target, spec=spec))
    written = json.loads(json.dumps(run.to_json()))
    assert written["target"]["spec"]["identity"]["cpu"]["family"] == 26
    assert run_target_key(Run.from_json(written)) == run_target_key(written) == store_target_key(spec)
    assert run_target_key(written) != RECORDED_KEYS["zen5"]   # the old key was of less: a new one


# -- provenance --------------------------------------------------------------------------------


def test_provenance_names_the_cpu_with_its_identity_and_fingerprint() -> None:
    texts = amd_texts("zen3")
    record = cpu_record(host_identity(texts), cpuinfo_text=texts.cpuinfo)
    assert record["model"] == "AMD EPYC"
    identity = record["identity"]
    assert (identity["vendor"], identity["family"], identity["model"], identity["stepping"]) == ("amd", 25, 1, 1)
    assert identity["features"] == ["avx", "avx2", "fma", "f16c"] and identity["vector_isa"] == "avx2"
    assert identity["cache_bytes"] == {"l1": 32 * 1024, "l2": 512 * 1024, "l3": 32 * 1024 ** 2}
    assert identity["cores"] == 2 and record["fingerprint"] == identity["fingerprint"]
    assert record["fingerprint"] == cpu_fingerprint(derive_host_spec(texts))


def test_a_session_provenance_carries_this_machines_fingerprint() -> None:
    cpu = collect(".", ["pytest"], {"charz_seed": 1})["cpu"]
    assert cpu["fingerprint"] == fingerprint_of(read_host_identity())
    assert cpu["identity"]["fingerprint"] == cpu["fingerprint"]


# -- calibration ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zen5_calibration(runs: dict[str, Run]) -> Any:
    return calibrate([runs["zen5"]])


def test_a_calibration_names_its_cpu_with_the_fingerprint(zen5_calibration: Any, runs: dict[str, Run]) -> None:
    assert zen5_calibration.host == "AMD EPYC [631a3fa7]"
    assert split_cpu_label(zen5_calibration.host) == ("AMD EPYC", "631a3fa7")
    assert zen5_calibration.host == cpu_label(runs["zen5"].target.spec)  # type: ignore[arg-type]
    assert predict(GEMM, target=runs["zen5"].target.spec, calibration=zen5_calibration).time_s > 0


def test_a_calibration_of_one_amd_epyc_is_refused_on_another(zen5_calibration: Any, runs: dict[str, Run]) -> None:
    zen3 = runs["zen3"].target.spec
    with pytest.raises(UsageError, match=r"measured on the CPU 'AMD EPYC' \(fingerprint 631a3fa7\), not on this "
                                         r"host's 'AMD EPYC' \(fingerprint 802ea440\)"):
        predict(GEMM, target=zen3, calibration=zen5_calibration)
    # a file written before the fingerprint names the CPU only: the name is what is checked
    bare = dataclasses.replace(zen5_calibration, host="AMD EPYC")
    assert predict(GEMM, target=zen3, calibration=bare).time_s > 0
    with pytest.raises(UsageError, match=r"measured on the CPU 'Some Other CPU', not"):
        predict(GEMM, target=zen3, calibration=dataclasses.replace(zen5_calibration, host="Some Other CPU"))


def test_runs_of_two_cpus_make_no_calibration(runs: dict[str, Run]) -> None:
    with pytest.raises(UsageError, match=r"several CPUs \(AMD EPYC \[631a3fa7\], AMD EPYC \[802ea440\]\)"):
        calibrate([runs["zen5"], runs["zen3"]])


# -- charz compare --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zen3_vs_zen4(runs: dict[str, Run]) -> dict[str, Any]:
    zen3 = build_profile([runs["zen3"]], ["zen3.run.json"])
    with gzip.open(ZEN4_PROFILE, "rt", encoding="utf-8") as handle:
        zen4 = json.load(handle)
    return compare_profiles([zen3, zen4], ["zen3.profile.json", "zen4.profile.json"])


def test_compare_says_first_that_the_cpus_differ_and_what_differs(zen3_vs_zen4: dict[str, Any]) -> None:
    caveats = zen3_vs_zen4["caveats"]
    first = caveats[0]
    assert first.startswith("different CPUs: cpu (zen4.profile.json) is not the CPU of cpu (zen3.profile.json)")
    assert "vector ISA: avx2 (cpu (zen3.profile.json)), avx512f (cpu (zen4.profile.json))" in first
    assert "caches: L2 512 KiB (cpu (zen3.profile.json)), 1 MiB (cpu (zen4.profile.json))" in first
    assert "bf16 native in cpu (zen4.profile.json) only" in first
    assert zen3_vs_zen4["cpus"]["same"] is False
    assert zen3_vs_zen4["cpus"]["differs"] == [[], ["vector ISA", "native dtypes", "caches"]]
    kernel = next(i for i, c in enumerate(caveats) if c.startswith("software versions differ: device kernel"))
    assert kernel > 0


def test_the_bf16_winner_is_called_the_instruction_sets(zen3_vs_zen4: dict[str, Any]) -> None:
    bf16 = next(r for r in zen3_vs_zen4["ceilings"] if r["name"] == "gemm:bf16")
    assert bf16["winner"] == 1 and bf16["margin"] == pytest.approx(273.2, rel=1e-3)
    said = [c for c in zen3_vs_zen4["caveats"] if c.startswith("gemm:bf16: ")]
    assert said == ["gemm:bf16: bf16 is native on cpu (zen4.profile.json) only (cpu (zen3.profile.json) converts it), "
                    "so its ratio 273x measures the instruction set, not a like-for-like speed"]
    assert zen3_vs_zen4["caveats"].index(said[0]) < zen3_vs_zen4["caveats"].index(
        next(c for c in zen3_vs_zen4["caveats"] if c.startswith("software versions")))


def test_the_markdown_says_it_before_any_ratio(zen3_vs_zen4: dict[str, Any]) -> None:
    text = render_markdown(zen3_vs_zen4)
    assert text.index("different CPUs:") < text.index("## Workload classes") < text.index("## Ceilings")
    assert text.index("different CPUs:") < text.index("273x")


def test_one_cpu_against_itself_is_not_called_different(runs: dict[str, Run]) -> None:
    zen3 = build_profile([runs["zen3"]], ["zen3.run.json"])
    done = compare_profiles([zen3, zen3], ["before.json", "after.json"])
    assert done["cpus"]["same"] is True
    assert not any("different CPUs" in c or "native on" in c for c in done["caveats"])


def test_profiles_with_identities_name_family_model_and_features() -> None:
    zen3, zen4 = (derive_host_spec(amd_texts(name)) for name in ("zen3", "zen4"))
    profiles = []
    for spec in (zen3, zen4):
        profile = {"kind": "charz-profile", "version": 1, "runs": [{"path": "r"}], "provenance": {}, "curves": {},
                   "target": {"id": "cpu", "name": spec.identity.name, "kind": "cpu",
                              "identity": identity_document(spec)},
                   "ceilings": [{"name": "gemm:fp32", "value": 1e11, "unit": "FLOP/s"}]}
        profiles.append(profile)
    assert profile_identity(profiles[1]) == identity_document(zen4)
    first = compare_profiles(profiles, ["zen3.json", "zen4.json"])["caveats"][0]
    assert "family/model: family 25, model 1, stepping 1 (cpu (zen3.json)), family 25, model 17, stepping 1" in first
    assert "features: avx512f avx512_bf16 avx512_vnni only in cpu (zen4.json)" in first
    assert "native dtypes: bf16 native in cpu (zen4.json) only; int8 native in cpu (zen4.json) only" in first


def test_differences_use_only_what_both_sides_know() -> None:
    zen4 = identity_document(derive_host_spec(amd_texts("zen4")))
    legacy = {"source": "profile figures", "model_name": "AMD EPYC", "vector_isa": "avx512f",
              "cache_bytes": {"l2": 1024 * 1024}, "cores": 2.0, "native_by_dtype": {}}
    assert identity_differences(zen4, legacy) == []            # nothing known tells them apart
    moved = identity_differences(zen4, {**legacy, "cache_bytes": {"l1": 48 * 1024}}, ("a", "b"))
    assert moved == [("caches", "L1 32 KiB (a), 48 KiB (b)")]
