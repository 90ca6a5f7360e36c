"""Predictions outside pytest: ``predict(work, target=..., model=...)`` and the model registry.

Ceilings come from the target's datasheet spec, or from a capability profile when one is given
(figures the profile lacks, such as capacities or unit counts, are filled from the spec; every
figure keeps its source). ``spec-roofline`` always uses the datasheet; ``empirical-roofline``
needs a profile.
"""
from __future__ import annotations

import json
import os
from functools import partial
from typing import Any, Callable, Mapping, Sequence, Union, overload

from ..errors import UsageError
from ..work import Work
from .base import Model, Prediction, Uncovered
from .calibrate import Calibration
from .ceilings import Ceilings
from .comm import AlphaBeta
from .composite import Composite
from .gemm import Gemm
from .launch import Launch
from .roofline import HierarchicalRoofline, Roofline, roofline_floor_s

ProfileArg = Union[Mapping[str, Any], str, "os.PathLike[str]", None]

MODELS: dict[str, Callable[[], Model]] = {
    "spec-roofline": partial(Roofline, "spec-roofline"),
    "empirical-roofline": partial(Roofline, "empirical-roofline"),
    "hierarchical-roofline": HierarchicalRoofline,
    "gemm": Gemm,
    "alpha-beta": AlphaBeta,
    "launch": Launch,
    "composite": Composite,
}


def get_model(name: str) -> Model:
    """A fresh model by registry name; an unknown name is a UsageError listing the known ones."""
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    return MODELS[name]()


def read_profile(profile: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    """A capability profile given as a mapping or a JSON file path (UsageError when unreadable)."""
    if isinstance(profile, Mapping):
        return profile
    try:
        with open(profile, encoding="utf-8") as handle:
            loaded = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read capability profile {os.fspath(profile)!r}: {exc}") from exc
    if not isinstance(loaded, Mapping):
        raise UsageError(f"capability profile {os.fspath(profile)!r} is not a JSON object")
    return loaded


def ceilings_for(target: str, model: str = "composite", profile: ProfileArg = None) -> Ceilings:
    """The ceilings ``model`` should see for ``target`` (and ``profile``, a mapping or JSON path)."""
    from ..targets.catalogue import resolve

    spec_ceilings = Ceilings.from_spec(resolve(target))
    if model == "spec-roofline":
        return spec_ceilings
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


@overload
def predict(work_or_works: Work, target: str = ..., model: str | Model = ..., profile: ProfileArg = ...,
            calibration: Calibration | Mapping[str, Any] | None = ...) -> Prediction: ...
@overload
def predict(work_or_works: Sequence[Work], target: str = ..., model: str | Model = ...,
            profile: ProfileArg = ..., calibration: Calibration | Mapping[str, Any] | None = ...
            ) -> list[Prediction]: ...
def predict(
    work_or_works: Work | Sequence[Work],
    target: str = "h100-sxm",
    model: str | Model = "composite",
    profile: ProfileArg = None,
    calibration: Calibration | Mapping[str, Any] | None = None,
) -> Prediction | list[Prediction]:
    """Predict one Work (-> Prediction) or a sequence of them (-> list, same order).

    ``target`` is a catalogue name or alias; ``model`` a registry name (:data:`MODELS`) or a
    model object; ``profile`` a capability profile (mapping or JSON path); ``calibration`` a
    :class:`Calibration` (or its JSON mapping) fitted for this model.
    """
    chosen = get_model(model) if isinstance(model, str) else model
    ceilings = ceilings_for(target, chosen.name, profile)
    if isinstance(calibration, Mapping):
        calibration = Calibration.from_json(calibration)
    if calibration is not None and calibration.model != chosen.name:
        raise UsageError(f"the calibration is for model {calibration.model!r}, not {chosen.name!r}")

    def one(work: Work) -> Prediction:
        if not isinstance(work, Work):
            raise UsageError(f"predict takes a Work or a sequence of Work, got {work!r}")
        prediction = chosen.predict(work, ceilings)
        if calibration is None or not prediction.covered:
            return prediction
        try:
            floor_s = roofline_floor_s(work, ceilings)
        except Uncovered:
            floor_s = 0.0
        return calibration.adjust(prediction, work, floor_s)

    if isinstance(work_or_works, Work):
        return one(work_or_works)
    return [one(work) for work in work_or_works]
