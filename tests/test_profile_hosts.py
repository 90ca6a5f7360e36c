"""Runs of one target from several machines: the merged profile lists the hosts, each ceiling's
figure per host and how far the hosts are apart; validation keeps each run's host."""
from __future__ import annotations

from typing import Any

import pytest
from test_profile import ceiling, run_dict, synthetic_cases

from pytest_charz.validation.models import validate
from pytest_charz.profile import build_profile
from pytest_charz.records import Run


def run_on(host: str, fma_fp64: float, seed: int = 0) -> Run:
    data: dict[str, Any] = run_dict(synthetic_cases(fma_fp64, seed), version=2)
    data["provenance"] = {**data["provenance"], "host": host}
    return Run.from_json(data, f"{host}.json")


def test_a_profile_of_two_hosts_lists_both_and_the_spread_between_them() -> None:
    merged = build_profile([run_on("box-a", 0.9e12), run_on("box-b", 0.8e12, seed=1)], ["a.json", "b.json"])
    assert merged["provenance"]["hosts"] == ["box-a", "box-b"]
    fp64 = ceiling(merged, "flops:fp64")
    assert fp64["evidence"]["by_host"] == {"box-a": pytest.approx(0.9e12), "box-b": pytest.approx(0.8e12)}
    assert "differs between hosts by 11.8% (box-a 900 GFLOP/s, box-b 800 GFLOP/s)" in fp64["caveats"]
    # every ceiling measured on both hosts says so, not only the one that moved
    assert all(set(c["evidence"]["by_host"]) == {"box-a", "box-b"} for c in merged["ceilings"]
               if c["evidence"]["runs"] == [0, 1])


def test_runs_of_one_host_have_no_per_host_figures() -> None:
    merged = build_profile([run_on("box-a", 0.9e12), run_on("box-a", 0.8e12, seed=1)], ["a.json", "b.json"])
    assert merged["provenance"]["hosts"] == ["box-a"]
    fp64 = ceiling(merged, "flops:fp64")
    assert "by_host" not in fp64["evidence"]
    assert not any(c.startswith("differs between hosts") for c in fp64["caveats"])


def test_a_host_with_two_runs_counts_as_the_median_of_its_runs() -> None:
    runs = [run_on("box-a", 0.9e12), run_on("box-a", 0.7e12, seed=1), run_on("box-b", 1.0e12, seed=2)]
    fp64 = ceiling(build_profile(runs), "flops:fp64")
    assert fp64["evidence"]["by_host"] == {"box-a": pytest.approx(0.8e12), "box-b": pytest.approx(1.0e12)}


def test_validation_of_runs_from_two_hosts_keeps_each_runs_host() -> None:
    report = validate([run_on("box-a", 0.9e12), run_on("box-b", 0.8e12, seed=1)]).to_json()
    assert [(r["path"], r["host"]) for r in report["runs"]] == [("box-a.json", "box-a"), ("box-b.json", "box-b")]
