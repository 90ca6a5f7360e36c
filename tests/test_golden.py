"""Golden files: a recorded run gives the same profile, calibration and validation.

``data/runs/amd-epyc-zen5-kvm-2vcpu.run.json.gz`` is a full CPU suite run (format version 1)
recorded on an AMD EPYC Zen 5 guest; ``data/golden/`` holds what ``charz profile``, ``charz
calibrate`` and ``charz validate`` wrote from it. The JSON outputs are compared parsed: the same
keys, the same list lengths, equal strings, booleans and nulls, equal integers, and floats equal
to a relative 1e-6; a relative error (``error``, a band's ``lo`` and ``hi``, a table's ``bias``,
``median_abs``, ``p90_abs`` and ``mape``) is compared as its ratio, ``1 + x``. Another CPU's SIMD
path rounds the vectorized logs and exponentials of the fits differently, and their last digits
carry into every figure: against files written on a Xeon, a Zen 5 guest moved them by up to
2.6e-8, and by 3.1e-8 with its AVX-512 paths off (``NPY_DISABLE_CPU_FEATURES``), as ratios.
Tightening the fits' least-squares tolerances did not remove it. An error of -0.00053 moved by
5.6e-10 (1e-6 of itself, 5.6e-10 of its ratio). The
top-level ``created`` time stamp of each output is left out. ``profile.md`` is compared as text,
its numbers at the same relative tolerance. A failure lists every differing place (its JSON path,
or line of the Markdown) with the golden and the produced value.

A change that alters an output on purpose regenerates the golden files with ``python
tests/test_golden.py`` and says why in its commit.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_charz import cli

DATA = Path(__file__).parent / "data"
RUN = DATA / "runs" / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"
GOLDEN = DATA / "golden"
OUTPUTS = {
    "profile.json": "golden.run.profile.json",
    "profile.md": "golden.run.profile.md",
    "calibration.json": "calibration.json",
    "validation.json": "validation.json",
}
REL_TOL = 1e-6
ABS_TOL = 1e-300
MAX_LISTED = 40
_CREATED = re.compile(r'^ "created": "[^"]*",$', re.MULTILINE)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a decimal number: digits with an optional fraction and exponent, or a bare fraction; a sign
# stays in the text around it (so dates and ranges tokenise the same on both sides)
_NUMBER = re.compile(r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)")


def normalize(text: str) -> str:
    """The output with its own top-level time stamp blanked (the run's stays as recorded)."""
    return _CREATED.sub(' "created": "<created>",', text)


def _child(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if _IDENTIFIER.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: Keys whose numbers are relative errors (ratios minus one, ``measured / predicted - 1``, and
#: their summaries): compared as the ratio.
RATIO_KEYS = frozenset({"error", "lo", "hi", "bias", "median_abs", "p90_abs", "mape"})


def numbers_equal(golden: float, produced: float, ratio: bool = False) -> bool:
    """Integers exactly; a float on either side at the relative tolerance (NaN equals NaN); with
    ``ratio``, the numbers are ratios minus one and ``1 + x`` is compared."""
    if isinstance(golden, int) and isinstance(produced, int):
        return golden == produced
    if math.isnan(golden) or math.isnan(produced):
        return math.isnan(golden) and math.isnan(produced)
    if ratio:
        golden, produced = 1.0 + golden, 1.0 + produced
    return math.isclose(golden, produced, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def json_differences(golden: Any, produced: Any, path: str = "$") -> list[str]:
    """Every place where ``produced`` differs from ``golden``, as ``PATH: golden X, produced Y``
    (or ``missing``); the top-level ``created`` of two documents is not compared."""
    out: list[str] = []
    _compare(golden, produced, path, out, top=True)
    return out


def _compare(golden: Any, produced: Any, path: str, out: list[str], top: bool = False, key: Any = None) -> None:
    if isinstance(golden, dict) and isinstance(produced, dict):
        for key in golden:
            if top and key == "created":
                continue
            if key not in produced:
                out.append(f"{_child(path, key)}: missing from the produced output (golden {_show(golden[key])})")
            else:
                _compare(golden[key], produced[key], _child(path, key), out, key=key)
        for key in produced:
            if key not in golden and not (top and key == "created"):
                out.append(f"{_child(path, key)}: not in the golden file (produced {_show(produced[key])})")
    elif isinstance(golden, list) and isinstance(produced, list):
        if len(golden) != len(produced):
            out.append(f"{path}: {len(golden)} item(s) in the golden file, {len(produced)} produced")
        for index, (a, b) in enumerate(zip(golden, produced)):
            _compare(a, b, _child(path, index), out)
    elif _is_number(golden) and _is_number(produced):
        if not numbers_equal(golden, produced, ratio=key in RATIO_KEYS):
            out.append(f"{path}: golden {_show(golden)}, produced {_show(produced)}")
    elif type(golden) is not type(produced) or golden != produced:
        out.append(f"{path}: golden {_show(golden)}, produced {_show(produced)}")


def text_differences(golden: str, produced: str, name: str = "text") -> list[str]:
    """Every line where ``produced`` differs from ``golden``: the text between numbers exactly,
    the numbers at the relative tolerance."""
    out: list[str] = []
    golden_lines, produced_lines = golden.splitlines(), produced.splitlines()
    if len(golden_lines) != len(produced_lines):
        out.append(f"{name}: {len(golden_lines)} line(s) in the golden file, {len(produced_lines)} produced")
    for number, (a, b) in enumerate(zip(golden_lines, produced_lines), 1):
        if a == b:
            continue
        parts_a, parts_b = _NUMBER.split(a), _NUMBER.split(b)
        # split with a group: text at even indices, numbers at odd ones
        if len(parts_a) != len(parts_b) or parts_a[::2] != parts_b[::2]:
            out.append(f"{name}:{number}: golden {_show(a)}, produced {_show(b)}")
            continue
        for x, y in zip(parts_a[1::2], parts_b[1::2]):
            if not numbers_equal(float(x), float(y)):
                out.append(f"{name}:{number}: number golden {x}, produced {y} (in {_show(b)})")
    return out


def differences(name: str, golden: str, produced: str) -> list[str]:
    """The differences of output ``name`` (JSON parsed, Markdown as text with numbers)."""
    if name.endswith(".json"):
        return json_differences(json.loads(golden), json.loads(produced))
    return text_differences(golden, produced, name)


def listing(name: str, found: list[str]) -> str:
    shown = found[:MAX_LISTED]
    more = len(found) - len(shown)
    return (f"{name} differs from the golden file in {len(found)} place(s):\n  " + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more else ""))


def write_outputs(directory: Path) -> dict[str, str]:
    """Run the three commands on the golden run in ``directory``; their normalized outputs."""
    with gzip.open(RUN, "rb") as packed, open(directory / "golden.run.json", "wb") as unpacked:
        shutil.copyfileobj(packed, unpacked)
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        assert cli.main(["profile", "golden.run.json", "-o", "out"]) == 0
        assert cli.main(["calibrate", "golden.run.json", "--out", "out/calibration.json"]) == 0
        assert cli.main(["validate", "golden.run.json", "-o", "out"]) == 0
    finally:
        os.chdir(cwd)
    return {name: normalize((directory / "out" / produced).read_text(encoding="utf-8"))
            for name, produced in OUTPUTS.items()}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return write_outputs(tmp_path_factory.mktemp("golden"))


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_output_matches_golden(outputs: dict[str, str], name: str) -> None:
    found = differences(name, (GOLDEN / name).read_text(encoding="utf-8"), outputs[name])
    if found:
        pytest.fail(listing(name, found), pytrace=False)


def test_normalize_blanks_only_the_top_level_time_stamp() -> None:
    text = '{\n "created": "2026-12-01T08:31:35+00:00",\n "runs": [\n  {\n   "created": "2026-11-30"\n  }\n ]\n}\n'
    assert normalize(text) == text.replace("2026-12-01T08:31:35+00:00", "<created>")


GOLDEN_DOC = {"created": "2026-12-01T08:31:35+00:00", "target": "cpu", "n": 3, "ok": True, "none": None,
              "fit": {"r2": 0.9823324147289519, "points": [1.5, 2.5e-12]}, "flops:fp32": 5.5e11}


def _changed(**changes: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(GOLDEN_DOC))
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        place = doc
        for key in parents:
            place = place[int(key)] if isinstance(place, list) else place[key]
        if value is KeyError:
            del place[last]
        elif isinstance(place, list):
            place[int(last)] = value
        else:
            place[last] = value
    return doc


def test_comparer_passes_the_last_digits_of_a_double_and_the_time_stamp() -> None:
    produced = _changed(fit__r2=0.9823324147289518, created="2027-01-01T00:00:00+00:00",
                        fit__points__1=2.5e-12 * (1 + 1e-12))
    assert json_differences(GOLDEN_DOC, produced) == []
    assert json_differences(GOLDEN_DOC, json.loads(json.dumps(GOLDEN_DOC))) == []


def test_comparer_names_a_float_off_at_a_hundred_thousandth() -> None:
    # a figure moved by another CPU's SIMD path stays inside the tolerance (up to 3.1e-8 between
    # a Xeon and a Zen 5 guest); one of 1e-5 is named
    found = json_differences(GOLDEN_DOC, _changed(fit__r2=0.9823324147289519 * (1 + 1e-5)))
    assert len(found) == 1 and found[0].startswith("$.fit.r2: golden 0.9823324147289519, produced 0.98234")
    assert json_differences(GOLDEN_DOC, _changed(fit__r2=0.9823324147289519 * (1 + 2e-7))) == []


def test_comparer_compares_an_error_as_its_ratio() -> None:
    # an error of -0.00053 moved by 5.6e-10 (1e-6 of itself) on a Zen 5 guest: its ratio did not move
    assert json_differences({"error": -0.0005329476216402451}, {"error": -0.0005329481772868849}) == []
    assert json_differences({"error": -0.00053}, {"error": -0.00063}) != []
    assert json_differences({"time_s": 5.3e-4}, {"time_s": 5.3e-4 * (1 + 1e-5)}) != []
    # a band's bounds and a table's summaries are relative errors too
    assert json_differences({"bias": 1e-4, "lo": -2e-3}, {"bias": 1e-4 + 1e-10, "lo": -2e-3 - 1e-10}) == []
    assert json_differences({"bias": 1e-4}, {"bias": 2e-4}) != []


def test_comparer_names_missing_added_and_changed_keys() -> None:
    found = json_differences(GOLDEN_DOC, _changed(fit__points=KeyError, host="AMD EPYC", n=4, ok=1,
                                                  target="cuda:0", none=0, **{"flops:fp32": 5.6e11}))
    joined = "\n".join(found)
    assert "$.fit.points: missing from the produced output (golden [1.5, 2.5e-12])" in joined
    assert '$.host: not in the golden file (produced "AMD EPYC")' in joined
    assert "$.n: golden 3, produced 4" in joined
    assert "$.ok: golden true, produced 1" in joined          # a bool is not a number
    assert '$.target: golden "cpu", produced "cuda:0"' in joined
    assert "$.none: golden null, produced 0" in joined
    assert '$["flops:fp32"]: golden 550000000000.0, produced 560000000000.0' in joined
    assert len(found) == 7


def test_comparer_counts_list_items_and_compares_only_the_top_level_created() -> None:
    golden = {"runs": [{"created": "2026-11-30"}], "xs": [1, 2]}
    found = json_differences(golden, {"runs": [{"created": "2026-12-01"}], "xs": [1, 2, 3]})
    assert found == ['$.runs[0].created: golden "2026-11-30", produced "2026-12-01"',
                     "$.xs: 2 item(s) in the golden file, 3 produced"]
    assert json_differences({"x": 1}, {"x": 1.0000000001}) == []          # float on one side: tolerance
    assert json_differences({"x": 10**17}, {"x": 10**17 + 1}) != []       # ints on both: exact


def test_text_comparer_compares_numbers_at_the_tolerance_and_the_rest_exactly() -> None:
    golden = "| gemm:fp32 | 0.9823324147289519 | 2026-12-01 |\nline two 3.5e-07 s\n"
    assert text_differences(golden, golden.replace("519", "518")) == []
    found = text_differences(golden, golden.replace("0.9823324147289519", "0.9823334147289519"), "profile.md")
    assert found == ["profile.md:1: number golden 0.9823324147289519, produced 0.9823334147289519 "
                     '(in "| gemm:fp32 | 0.9823334147289519 | 2026-12-01 |")']
    assert text_differences(golden, golden.replace("two", "2"), "profile.md")[0].startswith("profile.md:2: golden")
    assert text_differences(golden, golden + "extra\n", "profile.md") == [
        "profile.md: 2 line(s) in the golden file, 3 produced"]


def test_listing_caps_the_message() -> None:
    message = listing("validation.json", [f"$.cases[{i}].error: golden 1, produced 2" for i in range(100)])
    assert "in 100 place(s)" in message and "$.cases[39]" in message and "$.cases[40]" not in message
    assert message.endswith("... and 60 more")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for name, text in write_outputs(Path(scratch)).items():
            (GOLDEN / name).write_text(text, encoding="utf-8")
            print(f"wrote {GOLDEN / name}", file=sys.stderr)
