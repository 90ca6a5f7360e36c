"""The store's rules around a verdict: judge a case against its stored reference, then accept it
with a reason, save it as a new reference, or add it as one more session of a reference that has
not settled. The rules of the verdict itself are :mod:`pytest_charz.verdict`; this module is
where they meet the baseline files."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..explain import DISTURBANCE_FLAGS, conditions_summary
from ..verdict import Verdict, check_threshold, judge
from .documents import BaselineStore, StoreWriteError
from .reference import NEW_CASE_REASON, REFERENCE_SESSIONS, Reference

if TYPE_CHECKING:
    from ..models.base import Prediction
    from ..records import CaseRecord


def evaluate_case(case: "CaseRecord", store: BaselineStore, target_id: str, prediction: "Prediction | None",
                  band: Mapping[str, Any] | None, provenance: Mapping[str, Any], threshold: float = 0.05,
                  strict: bool = False, accept_reason: str | None = None, save_new: bool = True,
                  alpha: float = 0.01,
                  on_write_error: Callable[[StoreWriteError], None] | None = None) -> Verdict:
    """Judge a measured case against its stored reference, and keep the store's rules.

    ``target_id`` is the store's target key (:func:`~pytest_charz.store.store_target_key`);
    ``provenance`` the run's provenance, with the run's device record under ``"device"`` so driver
    versions are compared. ``band`` None uses the band stored with the case. A ``threshold``
    outside (0, 1) is a UsageError naming the case. Then the store:

    * ``accept_reason`` given: the case's reference becomes this measurement, the reason is
      appended to its history; the verdict (against the old reference) then fails only for
      ``model-error``, as drift was accepted.
    * no reference and ``save_new``: the measurement is saved as the reference (reason
      ``"new case"``) if it was decidable (outcome new or model-error) and undisturbed.
    * a reference that has not settled and ``save_new``: a clean, quiet measurement is added to
      it as one more session.
    * otherwise the stored reference is kept, never overwritten.
    ``Verdict.baseline`` says which happened. FormatError from a corrupt store propagates. A
    write the file system refuses (:class:`StoreWriteError`) is not raised: the verdict stands as
    judged (a drift that was to be accepted still fails), ``Verdict.baseline`` says what was not
    written and why, and the error goes to ``on_write_error``.
    """
    threshold = check_threshold(threshold, case.id)
    suite, case_id = case.suite, case.id
    entry = store.entry(target_id, suite, case_id)
    reference = entry.reference if entry is not None else None
    conditions = conditions_summary(case.conditions.to_json())
    verdict = judge(case.measurement, prediction, band if band is not None else (entry.band if entry else None),
                    reference, conditions, reference.conditions if reference else None, provenance,
                    reference.provenance if reference else None, threshold=threshold, alpha=alpha, strict=strict,
                    achieved=case.peak_fraction)
    has_samples = bool(case.measurement.samples_s) and case.measurement.median_s is not None
    if accept_reason is not None:
        if not has_samples:
            return _noted(verdict, "not accepted: no kept samples")
        try:
            store.accept(target_id, suite, case_id, Reference.from_case(case, provenance), accept_reason, band=band)
        except StoreWriteError as exc:
            return _write_failed(verdict, "not accepted", exc, on_write_error)
        return replace(_noted(verdict, f"accepted: {accept_reason.strip()}"), fails=verdict.outcome == "model-error")
    if reference is not None:
        if not reference.settled and save_new:
            try:
                return _noted(verdict, _add_session(store, target_id, case, provenance, verdict, conditions))
            except StoreWriteError as exc:
                return _write_failed(verdict, "kept (not added as a reference session)", exc, on_write_error)
        return _noted(verdict, "kept")
    if not save_new:
        return _noted(verdict, "not saved: saving new references is off")
    disturbed = [f for f in conditions["flags"] if f in DISTURBANCE_FLAGS]
    if verdict.outcome not in ("new", "model-error"):
        return _noted(verdict, f"not saved: the measurement is {verdict.outcome}")
    if disturbed:
        return _noted(verdict, f"not saved: measured under {', '.join(disturbed)}")
    try:
        store.put(target_id, suite, case_id, Reference.from_case(case, provenance), NEW_CASE_REASON, band=band)
    except StoreWriteError as exc:
        return _write_failed(verdict, "not saved", exc, on_write_error)
    return _noted(verdict, f"saved: {NEW_CASE_REASON}")


def _add_session(store: BaselineStore, target_id: str, case: "CaseRecord", provenance: Mapping[str, Any],
                 verdict: Verdict, conditions: Mapping[str, Any]) -> str:
    """Add this measurement to a reference still gathering sessions, when it is clean."""
    disturbed = [f for f in conditions["flags"] if f in DISTURBANCE_FLAGS]
    if disturbed:
        return f"kept (not added as a reference session: measured under {', '.join(disturbed)})"
    rel = case.measurement.rel_ci_halfwidth
    if rel is None or not rel <= verdict.threshold / 2.0:
        return "kept (not added as a reference session: too noisy)"
    entry = store.add_session(target_id, case.suite, case.id, Reference.from_case(case, provenance))
    return f"added as reference session {entry.reference.sessions} of {REFERENCE_SESSIONS}"


def _write_failed(verdict: Verdict, what: str, error: StoreWriteError,
                  on_write_error: Callable[[StoreWriteError], None] | None) -> Verdict:
    """The verdict with the store write that failed in its note, after telling ``on_write_error``."""
    if on_write_error is not None:
        on_write_error(error)
    return _noted(verdict, f"{what}: {error}")


def _noted(verdict: Verdict, baseline: str) -> Verdict:
    return replace(verdict, baseline=baseline, message=f"{verdict.message}\nbaseline: {baseline}")


__all__ = ["evaluate_case"]
