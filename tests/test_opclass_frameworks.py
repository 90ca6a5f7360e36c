"""NumPy and PyTorch ops calibrated apart, and writes into existing buffers without fresh pages
(a simulated machine: each framework's copy at its own hidden speed)."""
from __future__ import annotations

import math

import pytest

from pytest_charz.calibration.class_keys import class_key, fallback_keys, lookup_keys
from pytest_charz.calibration.fit import fit
from pytest_charz.calibration.observations import Observation
from pytest_charz.models import Ceilings
from pytest_charz.models.registry import get_model
from pytest_charz.work import Work

PROFILE = {"kind": "charz-profile", "version": 1, "target": {"id": "cpu", "kind": "cpu", "compute_units": 2},
           "ceilings": [{"name": "flops:fp32", "value": 200e9, "unit": "FLOP/s"},
                        {"name": "bandwidth:dram", "value": 20e9, "unit": "B/s"}]}
DISPATCH = {"numpy": 0.4e-6, "torch": 1.5e-6}
#: What each framework's copy really reaches (hidden from the model): NumPy's copyto into an
#: existing array at 18 GB/s, PyTorch's clone, which allocates its output, at 9 GB/s.
TRUE_RATE = {"numpy": 18e9, "torch": 9e9}
FRESH_PAGE_S = 2e-6
SIZES = [1 << e for e in range(10, 23, 2)]


def copy(framework: str, elements: int, **shape: object) -> Work:
    return Work(bytes=8.0 * elements, launches=1, op="copy",
                shape={"elements": elements, "dtype": "fp32", "framework": framework, **shape})


def true_s(work: Work) -> float:
    framework = str(work.shape["framework"])
    wobble = 1.0 + 0.03 * math.sin(math.log10(work.total_bytes))
    return DISPATCH[framework] + work.total_bytes / TRUE_RATE[framework] * wobble


def observations() -> list[Observation]:
    cases = [Observation(f"copy-{f}-{n}", "cpu", copy(f, n, **({"out": 1} if f == "numpy" else {})),
                         true_s(copy(f, n))) for f in ("numpy", "torch") for n in SIZES]
    cases += [Observation(f"dispatch-{f}", "cpu", Work(launches=1, op="dispatch", shape={"kind": f"{f}-add"}), s)
              for f, s in DISPATCH.items()]
    cases.append(Observation("fresh", "cpu", Work(op="allocation", shape={"kind": "torch-fresh-pages",
                                                                         "framework": "torch", "pages": 10240}),
                             10240 * FRESH_PAGE_S))
    return cases


@pytest.fixture(scope="module")
def fitted():
    return fit(get_model("opclass"), observations(), Ceilings.from_profile(PROFILE), 0.9)


def test_numpy_works_have_class_keys_of_their_own() -> None:
    numpy, torch = copy("numpy", 1 << 20), copy("torch", 1 << 20)
    assert class_key(numpy) == "copy@numpy:fp32" and class_key(torch) == "copy:fp32"
    assert all("@numpy" in key for key in fallback_keys(numpy))
    # a calibration without NumPy cases still prices a NumPy op, by the framework-neutral fit
    assert lookup_keys(numpy)[-1] == "copy"


def test_numpy_and_torch_are_calibrated_apart(fitted) -> None:
    # failure kind: a torch class fit applied to NumPy copies into preallocated outputs (+107%)
    classes = fitted.calibration.classes
    assert classes["copy@numpy:fp32"].n == len(SIZES) and classes["copy:fp32"].n == len(SIZES)
    for framework in ("numpy", "torch"):
        work = copy(framework, 3 << 19, **({"out": 1} if framework == "numpy" else {}))   # between sizes
        predicted = fitted.predict(work)
        assert predicted.time_s == pytest.approx(true_s(copy(framework, 3 << 19)), rel=0.08), framework
        assert any(note.startswith(f"calibrated as {class_key(work)}") for note in predicted.notes)


def test_a_copy_into_a_preallocated_output_pays_no_fresh_pages(fitted) -> None:
    # failure kind: fresh-page cost applied to writes into existing buffers (+107%, +128%)
    big = 16 << 20        # 64 MiB of fp32, past glibc's 32 MiB mmap threshold
    for key in ("out", "preallocated", "inplace"):
        into = fitted.predict(copy("numpy", big, **{key: 1}))
        assert not any(term.startswith("alloc:") for term in into.breakdown), key
    allocating = fitted.predict(copy("torch", big))
    pages_s = allocating.breakdown["alloc:torch"]
    assert pages_s == pytest.approx(big * 4 / 4096 * FRESH_PAGE_S)
    # the pages are the operating system's, added outside the class's efficiency
    without = fitted.predict(copy("torch", big, out=1))
    assert allocating.time_s == pytest.approx(without.time_s + pages_s, rel=1e-9)
