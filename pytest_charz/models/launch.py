"""``launch``: kernel launches times the launch (dispatch) overhead of the target.

The overhead is a measured ceiling (the runtime suite's empty-kernel launch rate); datasheets have
none, so with datasheet-only ceilings work that launches is not covered. As a standalone model the
result is the larger of the launch time and the roofline bound; :mod:`.composite` decides how
launches combine with kernel time.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..work import Work
from .base import Prediction, Uncovered, guarded
from .ceilings import Ceilings
from .roofline import predict_overlapped, roofline_terms, target_label


def launch_terms(work: Work, ceilings: Ceilings) -> dict[str, float]:
    """``{"launch": launches * overhead_s}``; empty when the work launches nothing."""
    if not work.launches:
        return {}
    overhead = ceilings.launch_overhead()
    if overhead is None:
        raise Uncovered(
            f"no launch overhead figure on {target_label(ceilings)} for {work.launches} launches "
            "(a measured ceiling: use a capability profile)"
        )
    return {"launch": work.launches * overhead}


@dataclass(frozen=True)
class Launch:
    name: str = "launch"

    def predict(self, work: Work, ceilings: Ceilings) -> Prediction:
        return guarded(self.name, lambda: predict_overlapped(
            self.name, {**roofline_terms(work, ceilings), **launch_terms(work, ceilings)},
            "launches, FLOPs or DRAM bytes"))
