"""Predictions outside pytest: ``predict(work, target=..., model=..., profile=..., calibration=...)``.

Ceilings come from the target's datasheet spec, or from a capability profile when one is given
(figures the profile lacks, such as capacities or unit counts, are filled from the spec; every
figure keeps its source). ``spec-roofline`` always uses the datasheet; ``empirical-roofline``
needs a profile. The ``opclass`` model also gets the profile's op-class figures (the measured
GEMM, dispatch per framework), or the calibration's where it has them.
A :class:`~pytest_charz.calibration.efficiency.Calibration` divides the model's
prediction by the fitted efficiency, never below the roofline floor.

This façade sits above ``models`` (which know nothing of profiles on disk or calibrations);
:func:`pytest_charz.predict` calls :func:`predict`. (Not named ``predict.py``: a submodule of that
name would replace the ``pytest_charz.predict`` function once imported.)
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence, Union, overload

from .calibration.efficiency import Calibration
from .errors import UsageError
from .formats import PROFILE
from .models.base import Model, Prediction
from .models.ceilings import Ceilings
from .models.registry import DEFAULT_MODEL, get_model
from .models.roofline import roofline_floor_or_zero_s
from .work import Work

ProfileArg = Union[Mapping[str, Any], str, "os.PathLike[str]", None]
CalibrationArg = Union[Calibration, Mapping[str, Any], None]


def read_profile(profile: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    """A capability profile given as a mapping or a profile file path, checked as
    ``formats.PROFILE`` (FormatError naming the file, or "the capability profile", otherwise)."""
    if isinstance(profile, Mapping):
        return PROFILE.check(profile, "the capability profile")
    return PROFILE.load(profile)


def ceilings_for(target: str, model: str = DEFAULT_MODEL, profile: ProfileArg = None) -> Ceilings:
    """The ceilings ``model`` should see for ``target`` (and ``profile``, a mapping or file path)."""
    from .targets.catalogue import resolve

    spec = resolve(target)
    if model == "spec-roofline":  # the datasheet roofline: priors only for figures it lacks
        return Ceilings.from_spec(spec, priors="missing")
    spec_ceilings = Ceilings.from_spec(spec)
    if profile is None:
        if model == "empirical-roofline":
            raise UsageError("empirical-roofline predicts from measured ceilings: pass profile=")
        return spec_ceilings
    measured = Ceilings.from_profile(read_profile(profile))
    if measured.target_id and measured.target_id != spec_ceilings.target_id:
        raise UsageError(
            f"the profile is of {measured.target_id!r}, not of target {spec_ceilings.target_id!r}; "
            f"pass target={measured.target_id!r}"
        )
    return measured.filled_from(spec_ceilings)


def _calibration_for(model: Model, calibration: CalibrationArg) -> Calibration | None:
    """``calibration`` as a Calibration of ``model`` (UsageError when it is another model's)."""
    if isinstance(calibration, Mapping):
        calibration = Calibration.from_json(calibration)
    if calibration is not None and calibration.model != model.name:
        raise UsageError(f"the calibration is for model {calibration.model!r}, not {model.name!r}")
    return calibration


def with_measured_costs(model: Model, profile: ProfileArg, calibration: Calibration | None) -> Model:
    """A model with op-class figures (``opclass``) given the measured ones: the calibration's
    first (its class fits were made against them), then the profile's; other models as they are."""
    with_costs = getattr(model, "with_costs", None)
    if with_costs is None:
        return model
    from .models.ceilings_profile import read_op_costs
    from .models.opclass_costs import OpCosts

    costs = read_op_costs(read_profile(profile)) if profile is not None else OpCosts()
    if calibration is not None and calibration.costs is not None:
        costs = calibration.costs.filled_from(costs)
    return with_costs(costs) if costs else model


@overload
def predict(work_or_works: Work, target: str = ..., model: str | Model = ..., profile: ProfileArg = ...,
            calibration: CalibrationArg = ...) -> Prediction: ...
@overload
def predict(work_or_works: Sequence[Work], target: str = ..., model: str | Model = ...,
            profile: ProfileArg = ..., calibration: CalibrationArg = ...) -> list[Prediction]: ...
def predict(
    work_or_works: Work | Sequence[Work],
    target: str = "h100-sxm",
    model: str | Model = DEFAULT_MODEL,
    profile: ProfileArg = None,
    calibration: CalibrationArg = None,
) -> Prediction | list[Prediction]:
    """Predict one Work (-> Prediction) or a sequence of them (-> list, same order); times in s.

    ``target`` is a catalogue name or alias; ``model`` a registry name
    (:data:`pytest_charz.models.registry.MODELS`) or a model object; ``profile`` a capability
    profile (mapping or file path); ``calibration`` a :class:`Calibration` (or its JSON mapping)
    fitted for this model.
    """
    chosen = get_model(model) if isinstance(model, str) else model
    ceilings = ceilings_for(target, chosen.name, profile)
    fitted = _calibration_for(chosen, calibration)
    chosen = with_measured_costs(chosen, profile, fitted)

    def one(work: Work) -> Prediction:
        if not isinstance(work, Work):
            raise UsageError(f"predict takes a Work or a sequence of Work, got {work!r}")
        prediction = chosen.predict(work, ceilings)
        if fitted is None or not prediction.covered:
            return prediction
        return fitted.adjust(prediction, work, roofline_floor_or_zero_s(work, ceilings))

    if isinstance(work_or_works, Work):
        return one(work_or_works)
    return [one(work) for work in work_or_works]
