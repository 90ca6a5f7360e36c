"""A near-empty function measured by pytest-benchmark and by pytest-charz in one session.

The per-call median each harness reports for a function that does (almost) nothing is the floor
of what it can resolve: the loop and call overhead that it adds to every sample."""
from __future__ import annotations

from pytest_charz import Work


def near_empty() -> None:
    return None


def test_pytest_benchmark_near_empty(benchmark):
    benchmark(near_empty)


def test_charz_near_empty(charz):
    charz.measure(near_empty, work=Work(), max_time=1.0)
