"""A/B in one session (``charz ab``): the suites of two revisions or two environments measured
interleaved, round by round, on one machine, and each case's B/A ratio judged paired by round.

:mod:`.judge` is the pure judgement, :mod:`.session` the rounds and their order, :mod:`.runner`
the pytest processes that measure one side once.
"""
from __future__ import annotations

from .judge import AB_OUTCOMES, CaseComparison, CaseSamples, judge_case, judge_cases
from .session import AB_RESULT, AbResult, Side, round_order, run_ab

__all__ = ["AB_OUTCOMES", "AB_RESULT", "AbResult", "CaseComparison", "CaseSamples", "Side", "judge_case",
           "judge_cases", "round_order", "run_ab"]
