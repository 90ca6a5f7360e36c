"""The workload suite (``suites/test_workloads.py``): what a quick run collects, and how profiled
aten ops are matched to captured ops, without running a model."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from pytest_charz.work import Work
from pytest_charz.workloads.graph import Graph, Op
from pytest_charz.workloads.optimer import match_ops

SUITE = Path(__file__).resolve().parent.parent / "suites" / "test_workloads.py"


def _collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    result = pytester.runpytest_subprocess(str(SUITE), "--collect-only", "-q", "-p", "no:cacheprovider", *args)
    assert result.ret == 0, result.stdout.str()
    return [line.rsplit("::", 1)[-1] for line in result.outlines if "::" in line]


def test_quick_collection_keeps_small_decoders_and_an_encoder(pytester: pytest.Pytester) -> None:
    # The simulated cases (test_workload_sim) collect as one skipped item off the sim backend.
    quick = [name for name in _collected(pytester, "--charz-quick") if not name.startswith("test_workload_sim[")]
    full = _collected(pytester)
    assert set(quick) == {"test_workload[llama-2-7b-prefill]", "test_workload[llama-2-7b-decode]",
                          "test_workload[bert-base-forward]"}
    assert set(quick) < set(full)
    assert {"test_workload[vit-b-16-forward]", "test_workload[mixtral-8x7b-decode]"} <= set(full)


@pytest.fixture
def workloads_suite(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(SUITE.parent))
    return importlib.import_module("test_workloads")


def _op(name: str, source: str) -> Op:
    return Op(name, "gemm" if source == "mm" else "elementwise", Work(1, 1, launches=1), source=source)


def test_profiled_ops_match_captured_ops_by_aten_name_and_order(workloads_suite: Any) -> None:
    graph = Graph("g", "forward", (_op("l.0.mm#0", "aten.mm.default"), _op("l.0.add#0", "aten.add.Tensor"),
                                   _op("l.1.mm#0", "aten.mm.default"), _op("l.1.silu#0", "aten.silu.default")))
    events = [("aten::mm", 3e-6), ("aten::add_", 1e-6), ("aten::empty", 5e-7), ("aten::mm", 4e-6)]
    times, unmatched = match_ops(graph, events)
    assert times == {"l.0.mm#0": 3e-6, "l.0.add#0": 1e-6, "l.1.mm#0": 4e-6}
    assert unmatched == 1                                 # silu was not profiled: counted, not guessed
