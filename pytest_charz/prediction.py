"""Predictions outside pytest: ``predict(work, target=..., model=..., profile=..., calibration=...)``
and :func:`load_predictor`, which every path uses to build the one prediction core
(:class:`~pytest_charz.calibration.predictor.Predictor`) from what a user passes.

Ceilings come from the target's datasheet spec, or from a capability profile when one is given
(figures the profile lacks, such as capacities or unit counts, are filled from the spec; every
figure keeps its source). ``spec-roofline`` always uses the datasheet; ``empirical-roofline``
needs a profile. With a calibration, the ceilings are the ones it was fitted against (the spec
filled with the figures measured on its calibration cases), filled from the profile's; the
``opclass`` model gets the calibration's op-class figures, filled from the profile's.

A calibration is ``charz calibrate``'s file in any form: its path, the document as written (a
mapping), or the :class:`~pytest_charz.calibration.file.Calibration` it loads to; all give
the same predictions. It is checked against what it is used with: another model, another target
or another host CPU than the one it was measured on is a UsageError naming the file and what
differs. (Not named ``predict.py``: a submodule of that name would replace the
``pytest_charz.predict`` function once imported.)
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union, overload

from .calibration.file import Calibration, load_calibration
from .calibration.predictor import Predictor
from .errors import FormatError, UsageError
from .formats import CALIBRATION, PROFILE
from .models.base import Model, Prediction
from .models.ceilings import Ceilings
from .models.registry import DEFAULT_MODEL, get_model
from .work import Work

if TYPE_CHECKING:
    from .targets.spec import TargetSpec

ProfileArg = Union[Mapping[str, Any], str, "os.PathLike[str]", None]
CalibrationArg = Union[Calibration, Mapping[str, Any], str, "os.PathLike[str]", None]
TargetArg = Union[str, "TargetSpec", None]


def read_profile(profile: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    """A capability profile given as a mapping or a profile file path, checked as
    ``formats.PROFILE`` (FormatError naming the file, or "the capability profile", otherwise)."""
    if isinstance(profile, Mapping):
        return PROFILE.check(profile, "the capability profile")
    return PROFILE.load(profile)


def read_calibration(calibration: CalibrationArg) -> tuple[Calibration | None, str]:
    """``calibration`` in any accepted form as ``(Calibration, where it came from)``.

    A path or a document that is not a calibration file, or the ``"calibration"`` record nested
    in one (it lacks the ceilings and bands the fit was made against), is a UsageError naming it.
    """
    if calibration is None:
        return None, ""
    if isinstance(calibration, Calibration):
        return calibration, "the given calibration"
    if isinstance(calibration, (str, os.PathLike)):
        path = os.fspath(calibration)
        if not os.path.exists(path):
            raise UsageError(f"calibration file {path!r} does not exist")
        try:
            return load_calibration(path), path
        except FormatError as exc:
            raise UsageError(f"{exc} (write one with `charz calibrate RUN`)") from None
    if isinstance(calibration, Mapping):
        if calibration.get("kind") != CALIBRATION.kind and "tables" in calibration:
            raise UsageError("the calibration given is the 'calibration' record nested in a calibration file, "
                             "without the ceilings and bands it was fitted with: pass the whole file (its path "
                             "or its document)")
        try:
            return Calibration.from_json(calibration, "the calibration document"), "the calibration document"
        except FormatError as exc:
            raise UsageError(str(exc)) from None
    raise UsageError(f"calibration= takes a calibration file's path, its document or a Calibration, "
                     f"got {type(calibration).__name__}")


def _spec_of(target: TargetArg) -> "TargetSpec":
    from .targets.catalogue import resolve
    from .targets.spec import TargetSpec

    if isinstance(target, TargetSpec):
        return target
    if not isinstance(target, str) or not target:
        raise UsageError(f"target must be a catalogue id or alias (or 'cpu'), got {target!r}")
    return resolve(target)


def spec_ceilings(spec: "TargetSpec", model: str) -> Ceilings:
    """The ceilings ``model`` sees from ``spec``'s datasheet: ``spec-roofline`` takes the cited
    priors only for figures the datasheet lacks, every other model all of them."""
    return Ceilings.from_spec(spec, priors="missing") if model == "spec-roofline" else Ceilings.from_spec(spec)


def _check_calibration_target(calfile: Calibration, source: str, spec: "TargetSpec") -> None:
    """A calibration used for ``spec``: the same target id, and for a host CPU the same CPU: the
    same fingerprinted identity (``"AMD EPYC [1a2b3c4d]"``), or for a file written before the
    fingerprint, the same model name."""
    from .targets.identity import cpu_fingerprint, split_cpu_label

    if calfile.target != spec.id:
        raise UsageError(f"the calibration {source!r} is of target {calfile.target!r}, not {spec.id!r}; "
                         f"predict with target={calfile.target!r} (or calibrate on runs of {spec.id!r})")
    if not calfile.host or spec.identity.kind != "cpu":
        return
    name, fingerprint = split_cpu_label(calfile.host)
    here_name, here_fingerprint = spec.identity.name, cpu_fingerprint(spec)
    if name != here_name or (fingerprint is not None and fingerprint != here_fingerprint):
        measured = f"{name!r}" + (f" (fingerprint {fingerprint})" if fingerprint else "")
        raise UsageError(f"the calibration {source!r} was measured on the CPU {measured}, not on this "
                         f"host's {here_name!r} (fingerprint {here_fingerprint}): calibrate on a run of this host, "
                         f"or leave target= out to predict for the CPU it was measured on")


def load_predictor(target: TargetArg = None, model: str | Model | None = None, profile: ProfileArg = None,
                   calibration: CalibrationArg = None) -> Predictor:
    """The prediction core for ``target`` (a catalogue name or alias, ``cpu``, or a TargetSpec),
    ``model`` (a registry name or a model object), ``profile`` (a capability profile: mapping or
    path) and ``calibration`` (module docstring), each loaded and checked once.

    Left out, the target and the model are the calibration's, else the target is the profile's;
    with neither a target, a calibration nor a profile, it is a UsageError.
    """
    calfile, source = read_calibration(calibration)
    measured = read_profile(profile) if profile is not None else None
    if model is None:
        chosen = get_model(calfile.model if calfile is not None else DEFAULT_MODEL)
    else:
        chosen = get_model(model) if isinstance(model, str) else model
    if not isinstance(chosen, Model):
        raise UsageError(f"model must be a registry name or a model object, got {model!r}")
    profile_ceilings = Ceilings.from_profile(measured) if measured is not None else None
    if target is None:
        if calfile is None and not (profile_ceilings and profile_ceilings.target_id):
            raise UsageError("a prediction needs a target: pass target= (a catalogue id or alias, or 'cpu'), "
                             "a calibration or a profile of one")
        target = None if calfile is not None else profile_ceilings.target_id  # type: ignore[union-attr]
    spec = _spec_of(target) if target is not None else None
    target_id = spec.id if spec is not None else calfile.target  # type: ignore[union-attr]
    if profile_ceilings is not None and profile_ceilings.target_id and profile_ceilings.target_id != target_id:
        raise UsageError(f"the profile is of {profile_ceilings.target_id!r}, not of target {target_id!r}; "
                         f"pass target={profile_ceilings.target_id!r}")
    if calfile is not None:
        if spec is not None:
            _check_calibration_target(calfile, source, spec)
        if calfile.model != chosen.name:
            raise UsageError(f"the calibration {source!r} is of model {calfile.model!r}, not {chosen.name!r}; "
                             f"pass model={calfile.model!r} or calibrate {chosen.name!r}")
        ceilings = calfile.ceilings
    else:
        assert spec is not None
        if chosen.name == "spec-roofline":
            return Predictor.of(chosen, spec_ceilings(spec, chosen.name), target=spec.id)
        ceilings = spec_ceilings(spec, chosen.name)
        if profile_ceilings is None and chosen.name == "empirical-roofline":
            raise UsageError("empirical-roofline predicts from measured ceilings: pass profile=")
    if profile_ceilings is not None:
        ceilings = profile_ceilings.filled_from(ceilings) if calfile is None else ceilings.filled_from(profile_ceilings)
    op_costs = None
    if measured is not None and getattr(chosen, "with_costs", None) is not None:
        from .models.ceilings_profile import read_op_costs

        op_costs = read_op_costs(measured)
    if calfile is not None:
        return Predictor.of(chosen, ceilings, calfile.calibration, calfile.bands, op_costs=op_costs,
                            target=target_id, calibration_source=source)
    return Predictor.of(chosen, ceilings, op_costs=op_costs, target=target_id)


@overload
def predict(work_or_works: Work, target: TargetArg = ..., model: str | Model | None = ...,
            profile: ProfileArg = ..., calibration: CalibrationArg = ...) -> Prediction: ...
@overload
def predict(work_or_works: Sequence[Work], target: TargetArg = ..., model: str | Model | None = ...,
            profile: ProfileArg = ..., calibration: CalibrationArg = ...) -> list[Prediction]: ...
def predict(
    work_or_works: Work | Sequence[Work],
    target: TargetArg = None,
    model: str | Model | None = None,
    profile: ProfileArg = None,
    calibration: CalibrationArg = None,
) -> Prediction | list[Prediction]:
    """Predict one Work (-> Prediction) or a sequence of them (-> list, same order); times in s.

    ``target`` is a catalogue name or alias (``cpu``: this host); ``model`` a registry name
    (:data:`pytest_charz.models.registry.MODELS`, default ``opclass``) or a model object;
    ``profile`` a capability profile (mapping or file path); ``calibration`` the file ``charz
    calibrate`` wrote (its path, its document or the loaded Calibration). Left out, the
    target and model are the calibration's (the target else the profile's). See
    :func:`load_predictor` for the checks.
    """
    predictor = load_predictor(target, model, profile, calibration)
    if isinstance(work_or_works, Work):
        return predictor.predict(work_or_works)
    if isinstance(work_or_works, (str, bytes)) or not isinstance(work_or_works, Sequence):
        raise UsageError(f"predict takes a Work or a sequence of Work, got {work_or_works!r}")
    return predictor.predict_all(work_or_works)
