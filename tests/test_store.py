from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from charz_factories import make_case, measurement_json
from pytest_charz.errors import FormatError, UsageError
from pytest_charz.measure import clock
from pytest_charz.store import (
    BaselineStore,
    DirectoryStore,
    InMemoryStore,
    Reference,
    suite_module,
    thin_samples,
)

TARGET = "sim:h100-sxm"
SUITE = "suites/memory/test_memory.py"
CASE = "suites/memory/test_memory.py::test_triad[64MiB]"


def reference(median_s: float = 1e-3, created: str = "2025-01-01T00:00:00+00:00", n: int = 50) -> Reference:
    samples = median_s * np.random.default_rng(7).lognormal(0.0, 0.01, n)
    return Reference(
        median_s=median_s, ci_s=(median_s * 0.99, median_s * 1.01), samples_s=thin_samples(samples),
        noise_target=0.01, mode="hot", op="stream", conditions={"flags": []},
        provenance={"libraries": {"numpy": "1.26.4"}, "device_versions": {"driver": "580.65"}, "commit": "abc"},
        created=created)


@pytest.fixture(params=["directory", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> BaselineStore:
    return DirectoryStore(tmp_path / "baselines") if request.param == "directory" else InMemoryStore()


def test_names_of_files_are_the_suite_stem_and_a_safe_target_directory(tmp_path: Path) -> None:
    assert suite_module("suites/memory/test_memory.py") == "test_memory"
    assert suite_module("test_odd name!.py") == "test_odd_name"
    with pytest.raises(UsageError):
        suite_module("...")
    directory = DirectoryStore(tmp_path)
    assert directory.path(TARGET, SUITE) == str(tmp_path / "sim_h100-sxm" / "test_memory.json")


def test_new_case_is_saved_with_a_history_entry(store: BaselineStore) -> None:
    assert store.get(TARGET, SUITE, CASE) is None
    ref = reference()
    store.put(TARGET, SUITE, CASE, ref)
    assert store.get(TARGET, SUITE, CASE) == ref
    entry = store.entry(TARGET, SUITE, CASE)
    assert entry is not None and entry.band is None
    assert [h.reason for h in entry.history] == ["new case"]
    assert entry.history[0].previous_median_s is None
    assert entry.history[0].median_s == pytest.approx(1e-3)
    assert entry.history[0].provenance == {"libraries": {"numpy": "1.26.4"}, "device_versions": {"driver": "580.65"},
                                           "commit": "abc"}
    assert store.suites(TARGET) == ("test_memory",)
    assert store.suites("other") == ()


def test_directory_store_writes_the_documented_format(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    store.put(TARGET, SUITE, CASE, reference(), band={"lo": -0.1, "hi": 0.2})
    document = json.loads((tmp_path / "sim_h100-sxm" / "test_memory.json").read_text())
    assert document["version"] == 1 and document["kind"] == "charz-baseline"
    assert document["target"] == TARGET and document["suite"] == "test_memory"
    case = document["cases"][CASE]
    assert set(case) == {"reference", "band", "history"}
    assert case["band"] == {"lo": -0.1, "hi": 0.2}
    assert case["reference"]["median_s"] == pytest.approx(1e-3)
    assert set(case["history"][0]) == {"time", "reason", "previous_median_s", "median_s", "provenance"}


def test_existing_reference_is_not_overwritten_without_a_reason(store: BaselineStore) -> None:
    store.put(TARGET, SUITE, CASE, reference(1e-3))
    with pytest.raises(UsageError, match="already has a reference"):
        store.put(TARGET, SUITE, CASE, reference(2e-3))
    for blank in ("", "   "):
        with pytest.raises(UsageError, match="non-empty reason"):
            store.accept(TARGET, SUITE, CASE, reference(2e-3), reason=blank)
    stored = store.get(TARGET, SUITE, CASE)
    assert stored is not None and stored.median_s == pytest.approx(1e-3)


def test_accept_replaces_and_appends_history(store: BaselineStore) -> None:
    store.put(TARGET, SUITE, CASE, reference(1e-3), band={"lo": -0.1, "hi": 0.1})
    store.accept(TARGET, SUITE, CASE, reference(1.2e-3, created="2025-02-01T00:00:00+00:00"), reason="driver 580 -> 590")
    entry = store.entry(TARGET, SUITE, CASE)
    assert entry is not None
    assert entry.reference.median_s == pytest.approx(1.2e-3)
    assert [h.reason for h in entry.history] == ["new case", "driver 580 -> 590"]
    assert entry.history[1].previous_median_s == pytest.approx(1e-3)
    assert entry.history[1].time == "2025-02-01T00:00:00+00:00"
    assert entry.band == {"lo": -0.1, "hi": 0.1}     # a band is kept unless a new one is given


def test_other_cases_of_the_suite_are_kept(store: BaselineStore) -> None:
    store.put(TARGET, SUITE, CASE, reference(1e-3))
    store.put(TARGET, "other/test_memory.py", CASE + "::other", reference(3e-3))
    first, second = store.get(TARGET, SUITE, CASE), store.get(TARGET, SUITE, CASE + "::other")
    assert first is not None and first.median_s == pytest.approx(1e-3)
    assert second is not None and second.median_s == pytest.approx(3e-3)


def _corrupt_and_check(tmp_path: Path, text: str, problem: str) -> None:
    store = DirectoryStore(tmp_path)
    path = Path(store.path(TARGET, SUITE))
    path.parent.mkdir(parents=True)
    path.write_text(text)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    for call in (lambda: store.get(TARGET, SUITE, CASE),
                 lambda: store.put(TARGET, SUITE, CASE, reference()),
                 lambda: store.accept(TARGET, SUITE, CASE, reference(), reason="new driver")):
        with pytest.raises(FormatError) as info:
            call()
        assert str(path) in str(info.value)
        assert problem in str(info.value)
    assert path.read_text() == text
    assert path.stat().st_mtime == pytest.approx(1_000_000_000)
    assert sorted(os.listdir(path.parent)) == ["test_memory.json"]


def test_corrupt_file_is_refused_naming_it_and_left_alone(tmp_path: Path) -> None:
    _corrupt_and_check(tmp_path, '{"version": 1, "kind": "charz-baseline", "cases": {', "not valid JSON")


def test_unknown_version_is_refused_naming_it_and_left_alone(tmp_path: Path) -> None:
    text = json.dumps({"version": 99, "kind": "charz-baseline", "target": TARGET, "suite": "test_memory", "cases": {}})
    _corrupt_and_check(tmp_path, text, "version 99 is not supported")


def test_other_targets_file_and_malformed_case_are_refused(tmp_path: Path) -> None:
    text = json.dumps({"version": 1, "kind": "charz-baseline", "target": "mi300x", "suite": "test_memory", "cases": {}})
    _corrupt_and_check(tmp_path / "a", text, "target 'mi300x'")
    text = json.dumps({"version": 1, "kind": "charz-baseline", "target": TARGET, "suite": "test_memory",
                       "cases": {CASE: {"reference": {"median_s": -1}}}})
    _corrupt_and_check(tmp_path / "b", text, "malformed reference")


def test_write_is_a_temp_file_then_a_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = DirectoryStore(tmp_path)
    store.put(TARGET, SUITE, CASE, reference(1e-3))
    path = store.path(TARGET, SUITE)
    before = Path(path).read_text()
    renames: list[tuple[str, str]] = []

    def failing_replace(src: str, dst: str) -> None:
        renames.append((src, dst))
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        store.accept(TARGET, SUITE, CASE, reference(2e-3), reason="new driver")
    assert len(renames) == 1
    src, dst = renames[0]
    assert dst == path and os.path.dirname(src) == os.path.dirname(path) and src != path
    assert Path(path).read_text() == before                      # the old file is intact
    assert sorted(os.listdir(os.path.dirname(path))) == ["test_memory.json"]   # the temp file is gone


def test_thinning_keeps_extremes_and_median() -> None:
    samples = np.random.default_rng(3).lognormal(0.0, 0.05, 5001)
    thinned = thin_samples(samples)
    assert len(thinned) == 200
    assert list(thinned) == sorted(thinned)
    assert thinned[0] == pytest.approx(samples.min(), rel=1e-6)
    assert thinned[-1] == pytest.approx(samples.max(), rel=1e-6)
    assert float(np.median(thinned)) == pytest.approx(float(np.median(samples)), rel=2e-3)
    assert len(thin_samples(samples[:37])) == 37


def test_reference_from_a_case_record_round_trips() -> None:
    samples = list(1e-3 * np.random.default_rng(5).lognormal(0.0, 0.01, 900))
    measured = measurement_json(float(np.median(samples)), samples_s=samples, mode="cold", ci_s=[9.9e-4, 1.01e-3])
    conditions = {"before": {"governor": "performance", "cpu_freq_mhz": [3000.0]}, "after": {},
                  "interval": {"flags": ["steal"], "steal_fraction": 0.03}}
    case = make_case(CASE, {"op": "stream"}, None, measurement=measured, conditions=conditions)
    provenance = {"libraries": {"numpy": "2.1.0"}, "suite_git": {"commit": "f00"}, "os": {"release": "6.8"},
                  "device": {"versions": {"driver": "590.10"}}}
    ref = Reference.from_case(case, provenance, created="2025-03-01T00:00:00+00:00")
    assert len(ref.samples_s) == 200
    assert ref.mode == "cold" and ref.op == "stream"
    assert ref.ci_s == pytest.approx((9.9e-4, 1.01e-3))
    assert ref.conditions["flags"] == ["steal"] and ref.conditions["governor"] == "performance"
    assert ref.provenance["device_versions"] == {"driver": "590.10"} and ref.provenance["commit"] == "f00"
    assert Reference.from_json(json.loads(json.dumps(ref.to_json()))) == ref
    with pytest.raises(UsageError, match="no kept samples"):
        Reference.from_case(make_case(CASE, {"op": "stream"}, None), provenance)


def test_new_references_are_stamped_by_the_clock() -> None:
    case = make_case(CASE, {"op": "stream"}, 1e-3)
    with clock.use(clock.FakeClock(wall_start=1_750_000_000.5)):
        ref = Reference.from_case(case, {})
    assert ref.created == "2025-06-15T15:06:40+00:00"
    assert ref.provenance["created"] == ref.created


def test_the_host_cpu_is_keyed_by_name_and_fingerprint_other_targets_by_id() -> None:
    from pytest_charz.store import target_key

    assert target_key("cpu", "cpu", "AMD EPYC 9654 96-Core Processor", "1a2b3c4d") == \
        "cpu-amd-epyc-9654-96-core-processor-1a2b3c4d"
    assert target_key("cpu", "cpu", "AMD EPYC") == "cpu-amd-epyc"          # no fingerprint: the name alone
    assert target_key("h100-sxm", "gpu", "NVIDIA H100 SXM", "1a2b3c4d") == "h100-sxm"
    for bad in ("1A2B3C4D", "1a2b3c", "not-hex!"):
        with pytest.raises(UsageError, match=f"8 lower-case hex digits, got {bad!r}"):
            target_key("cpu", "cpu", "AMD EPYC", bad)


def test_catalogue_targets_keep_their_id_as_the_key() -> None:
    from pytest_charz.store import store_target_key
    from pytest_charz.targets.catalogue import resolve

    assert store_target_key(resolve("h100")) == "h100-sxm"
    assert store_target_key(resolve("mi300")) == "mi300x"


def test_a_run_without_a_spec_is_keyed_by_its_cpu_name() -> None:
    from pytest_charz.store import run_target_key

    assert run_target_key({"target": {"id": "cpu", "kind": "cpu", "name": "AMD EPYC", "spec": None}}) == "cpu-amd-epyc"
    assert run_target_key({"target": {"id": "mi300x", "kind": "gpu", "name": "AMD Instinct MI300X"}}) == "mi300x"
