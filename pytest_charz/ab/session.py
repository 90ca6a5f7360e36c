"""The A/B session: rounds of one process per side in ABBA order, until every case is decided.

The measuring itself is a :class:`RoundRunner` (a pytest process per side in
:mod:`pytest_charz.ab.runner`; a fake in the tests), so the interleaving, the pairing and the
stopping rule are tested without timing anything.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from ..errors import UsageError
from ..formats import Format
from .judge import DEFAULT_ALPHA, CaseComparison, CaseSamples, all_decided, judge_cases

AB_RESULT = Format("charz-ab", 1, "charz A/B comparison")
SIDES = ("A", "B")
#: The default least and most rounds; the interval over rounds is a 95% one (judge.DEFAULT_ALPHA).
#: The rounds, not the samples, are the observations: a 95% CI of their median needs 6, and is
#: narrower than their full range from 9 on. A false alarm needs the whole interval beyond the
#: threshold while nothing changed, which the threshold's margin makes rare even at 95%; the
#: rounds buy power. Simulated (tests/test_ab.py holds both figures), at a 5% threshold with
#: paired ratios that scatter by 5% a round: an unchanged case is never called slower, and a 10%
#: slowdown is caught in nearly every session within 30 rounds (60 processes) at most; at 7%
#: scatter in about 87%. A session whose cases are decided stops early.
DEFAULT_ROUNDS = 8
DEFAULT_MAX_ROUNDS = 30


@dataclass(frozen=True)
class Side:
    """One side of the comparison: a name (A or B), what differs (a description for the report),
    the environment variables it sets, the Python interpreter it runs and the directory it runs in
    (a revision's tree); None means the current one."""

    name: str
    description: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    python: str | None = None
    directory: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "env": dict(self.env),
                "python": self.python, "directory": self.directory}


class RoundRunner(Protocol):
    """Measures the suites once on ``side`` (one fresh process) and returns each case's samples."""

    def __call__(self, side: Side, round_index: int) -> Mapping[str, CaseSamples]: ...


class PairRunner(Protocol):
    """Measures one round of both sides at once (two processes taking turns) and returns each
    side's samples, A's first."""

    def measure_round(self, sides: tuple[Side, Side], round_index: int
                      ) -> tuple[Mapping[str, CaseSamples], Mapping[str, CaseSamples]]: ...


def round_order(round_index: int) -> tuple[int, int]:
    """Indices into (A, B) in the order round ``round_index`` runs them: ABBA over pairs of rounds,
    so neither side always runs first (a trend over the session cancels over two rounds)."""
    return (0, 1) if round_index % 2 == 0 else (1, 0)


def check_rounds(rounds: int, max_rounds: int) -> tuple[int, int]:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise UsageError(f"--rounds must be a positive whole number of rounds, e.g. {DEFAULT_ROUNDS}; got {rounds!r}")
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < rounds:
        raise UsageError(f"--max-rounds must be a whole number at least --rounds ({rounds}); got {max_rounds!r}")
    return rounds, max_rounds


@dataclass(frozen=True)
class AbResult:
    """What an A/B session measured and decided."""

    sides: tuple[Side, Side]
    rounds: tuple[tuple[Mapping[str, CaseSamples], Mapping[str, CaseSamples]], ...]
    comparisons: tuple[CaseComparison, ...]
    stopped: str
    threshold: float
    alpha: float
    elapsed_s: float = 0.0
    mode: str = "one after the other"     # or "interleaved": how each round's two processes ran

    @property
    def fails(self) -> bool:
        return any(c.fails for c in self.comparisons)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for comparison in self.comparisons:
            counts[comparison.outcome] = counts.get(comparison.outcome, 0) + 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return {**AB_RESULT.stamp(), "sides": [s.to_json() for s in self.sides], "rounds": len(self.rounds),
                "order": ["".join(SIDES[i] for i in round_order(r)) for r in range(len(self.rounds))],
                "stopped": self.stopped, "mode": self.mode, "threshold": self.threshold, "alpha": self.alpha,
                "elapsed_s": self.elapsed_s, "fails": self.fails, "counts": self.counts(),
                "cases": [c.to_json() for c in self.comparisons]}


def run_ab(sides: tuple[Side, Side], runner: "RoundRunner | PairRunner", rounds: int = DEFAULT_ROUNDS,
           max_rounds: int = DEFAULT_MAX_ROUNDS, threshold: float = 0.05, alpha: float = DEFAULT_ALPHA,
           on_round: Callable[[int, Sequence[CaseComparison]], None] | None = None,
           clock: Callable[[], float] | None = None) -> AbResult:
    """Run at least ``rounds`` and at most ``max_rounds`` rounds, each one process per side (both
    at once, taking turns, where ``runner`` measures a round as a pair; else one after the other
    in :func:`round_order`), stopping once every case is decided (slower, faster or same).

    ``on_round(round_index, comparisons)`` is told each round's judgement (progress lines);
    ``clock`` (seconds) times the session.
    """
    rounds, max_rounds = check_rounds(rounds, max_rounds)
    start = clock() if clock else 0.0
    measured: list[tuple[Mapping[str, CaseSamples], Mapping[str, CaseSamples]]] = []
    comparisons: list[CaseComparison] = []
    stopped = "reached --max-rounds"
    for index in range(max_rounds):
        pair = getattr(runner, "measure_round", None)
        if pair is not None:
            measured.append(pair(sides, index))
        else:
            result: list[Mapping[str, CaseSamples]] = [{}, {}]
            for side_index in round_order(index):
                result[side_index] = runner(sides[side_index], index)
            measured.append((result[0], result[1]))
        comparisons = judge_cases(measured, threshold, alpha)
        if on_round is not None:
            on_round(index, comparisons)
        if index + 1 >= rounds and all_decided(comparisons):
            stopped = f"every case decided after {index + 1} rounds"
            break
    interleaved = getattr(runner, "measure_round", None) is not None and getattr(runner, "interleaved", True)
    return AbResult(sides, tuple(measured), tuple(comparisons), stopped, threshold, alpha,
                    (clock() - start) if clock else 0.0, "interleaved" if interleaved else "one after the other")


__all__ = ["AB_RESULT", "DEFAULT_ALPHA", "DEFAULT_MAX_ROUNDS", "DEFAULT_ROUNDS", "AbResult", "PairRunner", "RoundRunner", "SIDES", "Side",
           "check_rounds", "round_order", "run_ab"]
