"""The prediction core: one object that prices any :class:`~pytest_charz.work.Work`.

A :class:`Predictor` holds a model (with the measured op-class figures it needs), the ceilings
it predicts against and, optionally, a calibration of that model on those ceilings with its
verdict bands. Every path that prices work asks one: :func:`pytest_charz.predict`, the plugin's
judge, ``charz calibrate``'s hold-out scoring, ``charz validate``, ``predict_graph``, ``charz
workload predict`` and the simulator's kernel costs. A calibration changes a prediction in one
place only, :meth:`~.efficiency.ModelFit.apply`.

Building one from what a user passes (a target name, a profile file, a calibration file in any
form) and checking that they belong together is :func:`pytest_charz.prediction.load_predictor`;
this module takes typed values only, so the fitting code below it can use the same core.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import UsageError
from ..models.base import Model, Prediction
from ..models.ceilings import Ceilings
from ..models.roofline import roofline_floor_or_zero_s
from ..work import Work
from .efficiency import ModelFit

if TYPE_CHECKING:
    from ..models.opclass_costs import OpCosts


@dataclass(frozen=True)
class Predictor:
    """A model, its ceilings and (optionally) its calibration: ``predict(work) -> Prediction``.

    ``model`` already carries its measured op-class figures (see :meth:`of`); ``bands`` are the
    calibration's verdict bands per regime (relative errors ``lo``, ``hi``); ``target`` the target
    id the predictions are of; ``calibration_source`` where the calibration came from (a file's
    path, or a description), empty without one.
    """

    model: Model
    ceilings: Ceilings
    calibration: ModelFit | None = None
    bands: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    target: str = ""
    calibration_source: str = ""

    @classmethod
    def of(cls, model: Model, ceilings: Ceilings, calibration: ModelFit | None = None,
           bands: Mapping[str, Mapping[str, Any]] | None = None, *, op_costs: "OpCosts | None" = None,
           target: str = "", calibration_source: str = "") -> "Predictor":
        """A predictor of ``model`` on ``ceilings``; a model with op-class figures gets the
        calibration's (its class fits were made against them), filled from ``op_costs`` (a
        profile's). A calibration of another model is a UsageError."""
        if calibration is not None and calibration.model != model.name:
            raise UsageError(f"the calibration{_from(calibration_source)} is of model {calibration.model!r}, "
                             f"not {model.name!r}")
        with_costs = getattr(model, "with_costs", None)
        if with_costs is not None:
            from ..models.opclass_costs import OpCosts

            costs = op_costs if op_costs is not None else OpCosts()
            if calibration is not None and calibration.costs is not None:
                costs = calibration.costs.filled_from(costs)
            if costs:
                model = with_costs(costs)
        return cls(model, ceilings, calibration, dict(bands or {}), target or ceilings.target_id,
                   calibration_source)

    @property
    def model_name(self) -> str:
        return self.model.name

    @property
    def calibrated(self) -> bool:
        return self.calibration is not None

    def predict(self, work: Work) -> Prediction:
        """The prediction of one execution of ``work`` (times in s): the model on the ceilings,
        then the calibration's efficiency and interval where it fitted the work's class. A grouped
        GEMM on a CPU is its groups' calls (:meth:`_grouped_on_cpu`)."""
        if not isinstance(work, Work):
            raise UsageError(f"a prediction takes a Work, got {work!r}")
        priced = self._grouped_on_cpu(work)
        if priced is None:
            priced = self._kernel_on_cpu(work)
        if priced is None:
            priced = self._priced(work)
        return self._in_model_code(priced, work)

    def _priced(self, work: Work) -> Prediction:
        prediction = self.model.predict(work, self.ceilings)
        if self.calibration is None or not prediction.covered:
            return prediction
        return self.calibration.apply(prediction, work, roofline_floor_or_zero_s(work, self.ceilings), self.bands)

    def _in_model_code(self, prediction: Prediction, work: Work) -> Prediction:
        """``prediction`` of an op of eager model code on a CPU (``framework="torch-module"``) with
        what it loses against its replay alone: the profile's ``torch-module-cold`` share of its time
        alone (all of it but the model code's dispatch: its kernel, its bare dispatch, its pages),
        as the term ``dispatch:torch-module-cold`` (:mod:`pytest_charz.models.model_code`). Priced
        here, once, after the model, the calibration and a grouped GEMM's calls, so that every path
        gives it the same share; a graph's schedule slows its op by it too
        (:meth:`pytest_charz.workloads.runtime.Runtime.op_slowdown`)."""
        from ..models.opclass import dispatch_extra_s
        from ..models.model_code import MODULE_COLD
        from ..models.opclass_costs import framework_of

        costs = getattr(self.model, "costs", None)
        cold = costs.dispatch(MODULE_COLD) if costs is not None else None
        if (not cold or not prediction.covered or self.ceilings.kind != "cpu" or not work.launches
                or framework_of(work) != "torch-module" or prediction.time_s <= 0):
            return prediction
        cold_s = cold * max(prediction.time_s - dispatch_extra_s(prediction), 0.0)
        return _at_time(prediction, prediction.time_s + cold_s,
                        breakdown={**prediction.breakdown, f"dispatch:{MODULE_COLD}": cold_s})

    def _kernel_on_cpu(self, work: Work) -> Prediction | None:
        """A CPU op's kernel alone (a graph's op: ``launches=0``, its host paying the dispatch),
        else None: the op priced with its one call, less that call's dispatch as priced. A class's
        efficiency is fitted on cases that pay their dispatch, and at its small sizes it holds the
        kernel's own fixed cost (a 128-float ``mean`` 2.4 us, 0.65 of it dispatch); the kernel's
        Work priced alone by it kept almost none of that (0.014 us against 3.2), and
        ``predict_graph`` priced a norm's ``mean`` 3 us below what ``charz validate`` did. So an op
        costs the same in a graph as alone."""
        from ..models.opclass import dispatch_s
        from ..models.opclass_costs import op_class_of

        if (self.ceilings.kind != "cpu" or work.launches or op_class_of(work) in ("dispatch", "wakeup")
                or not (work.flops or work.bytes or work.accesses)):
            return None
        alone = self._priced(replace(work, launches=1))
        own_s = dispatch_s(alone)
        if not alone.covered or own_s <= 0 or alone.time_s <= 0:
            return None
        breakdown = {term: seconds for term, seconds in alone.breakdown.items() if not term.startswith("dispatch:")}
        bound = alone.bound if alone.bound in breakdown else max(breakdown, key=breakdown.__getitem__, default="")
        return _at_time(alone, max(alone.time_s - own_s, 0.0), breakdown=breakdown, bound=bound,
                        notes=(*alone.notes, f"kernel: the op priced with its call, less the call's dispatch "
                                             f"({own_s * 1e6:.3g} us)"))

    def _grouped_on_cpu(self, work: Work) -> Prediction | None:
        """A grouped GEMM (``op="gemm"``, ``shape["groups"]`` > 1: ``torch._grouped_mm`` of a
        mixture of experts) on a CPU, else None. PyTorch runs it there as its fallback
        (``_grouped_mm_fallback``, ATen ``GroupedMMUtils.h``): one ``at::mm_out`` per group, empty
        groups included. So it costs the op's own dispatch, one call per group (each at the
        framework's dispatch figure: slices and an ATen call, no Python) and, for each group that
        has rows, the kernel of that group's GEMM (its prediction less its dispatch). Which group
        a row goes to is data: the rows are taken spread over as many groups as there are rows
        (a token's experts are distinct), each group's bytes its share of the work's."""
        groups = int(work.shape.get("groups") or 1)
        dims = [work.shape.get(d) for d in ("m", "n", "k")]
        if (self.ceilings.kind != "cpu" or work.op != "gemm" or groups <= 1 or len(work.flops) != 1
                or any(not d or d < 1 for d in dims)):
            return None
        from ..models.opclass import dispatch_s

        m, n, k = (float(d) for d in dims)   # type: ignore[arg-type]
        busy = min(groups, math.ceil(m))
        rows = math.ceil(m / busy)
        (dtype,) = work.flops
        shape = {key: value for key, value in work.shape.items() if key != "groups"}
        # a group's call is ATen's, made from C++: the bare framework's dispatch, never model code's
        calls = {key: value for key, value in shape.items() if key != "framework"}
        group = Work(flops={dtype: 2.0 * rows * n * k}, bytes={level: amount / groups for level, amount in work.bytes.items()},
                     launches=1, op="gemm", shape={**calls, "m": rows, "module_calls": 0})
        one = self.predict(group)
        whole = self.model.predict(replace(work, shape=shape), self.ceilings)
        if not one.covered or not whole.covered:
            return None
        call_s = dispatch_s(one)
        kernel_s = one.time_s - call_s
        outer = {term: seconds for term, seconds in whole.breakdown.items() if term.startswith("dispatch:")}
        breakdown = {term: busy * seconds for term, seconds in one.breakdown.items() if not term.startswith("dispatch:")}
        for term, seconds in one.breakdown.items():
            if term.startswith("dispatch:"):
                outer[term] = outer.get(term, 0.0) + groups * seconds
        note = (f"grouped GEMM on a CPU: {groups} calls (PyTorch's _grouped_mm fallback), "
                f"{busy} with rows ({rows} each)")
        return _at_time(one, sum(outer.values()) + busy * kernel_s, breakdown={**breakdown, **outer},
                        notes=(*one.notes, note))

    def predict_all(self, works: Iterable[Work]) -> list[Prediction]:
        """Predictions of ``works`` in order; equal works are priced once (a 70B graph repeats
        the same few Works eighty times)."""
        ordered: Sequence[Work] = list(works)
        priced: dict[Work, Prediction] = {}
        for work in ordered:
            if work not in priced:
                priced[work] = self.predict(work)
        return [priced[work] for work in ordered]

    def band(self, regime: str) -> Mapping[str, Any] | None:
        """The calibrated verdict band of ``regime``, or None (not validated: not judged)."""
        return self.bands.get(regime) if self.calibration is not None else None


def _at_time(prediction: Prediction, time_s: float, **changes: Any) -> Prediction:
    """``prediction`` at ``time_s``, its interval scaled with it, and ``changes`` replaced."""
    low, high = prediction.interval_s
    scale = time_s / prediction.time_s if prediction.time_s > 0 else 1.0
    return replace(prediction, time_s=time_s, interval_s=(low * scale, high * scale), **changes)


def _from(source: str) -> str:
    return f" ({source})" if source else ""
