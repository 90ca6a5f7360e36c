"""Per-case prediction and verdict inside a pytest session: the model, the stored reference,
the calibrated error band of the case's regime, and the store's rules. A baseline file that
cannot be written never stops a case: the verdict says so and the session is told (see
:class:`CaseJudge`)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .options import DEFAULT_THRESHOLD, PROFILE_KEY
from .store import StoreWriteError, store_target_key

if TYPE_CHECKING:
    import pytest

    from .models.base import Prediction
    from .records import CaseRecord
    from .targets.spec import TargetSpec
    from .verdict import Verdict
    from .work import Work


class CaseJudge:
    """Predicts and judges the cases of one session. ``on_store_error(case_id, error)`` hears of
    each baseline write that failed (read-only directory, full disk...); the case's verdict
    stands, with the failure in its ``baseline`` note."""

    def __init__(self, config: "pytest.Config", spec: "TargetSpec", provenance: Mapping[str, Any],
                 on_store_error: Callable[[str, StoreWriteError], None] | None = None) -> None:
        from .models.registry import DEFAULT_MODEL
        from .prediction import load_predictor
        from .store import DirectoryStore

        self.spec = spec
        self.target_key = store_target_key(spec)
        root = config.getoption("charz_baselines") or os.path.join(str(config.rootpath), "baselines")
        self.store = DirectoryStore(root)
        model = config.getoption("charz_model") or DEFAULT_MODEL
        profile: Any = None
        if config.getoption("charz_profile"):
            # Read and checked once, when the session was configured (a bad file is a usage error).
            profile = config.stash.get(PROFILE_KEY, None) or config.getoption("charz_profile")
        # The calibration of this model on this target, next to the baselines (``charz
        # calibrate`` writes it there): the same core, and the same checks, as predict().
        calibration = os.path.join(root, self.target_key, f"calibration-{model}.json")
        self.predictor = load_predictor(spec, model, profile, calibration if os.path.exists(calibration) else None)
        self.model = self.predictor.model
        threshold = config.getoption("charz_threshold")
        self.threshold = DEFAULT_THRESHOLD if threshold is None else float(threshold)
        self.strict = bool(config.getoption("charz_strict"))
        self.accept_reason = config.getoption("charz_accept")
        save = config.getoption("charz_save_new")
        self.save_new = (not config.getoption("charz_quick")) if save is None else bool(save)
        self.provenance = provenance
        self.on_store_error = on_store_error

    def predict(self, work: "Work") -> "Prediction":
        """The case's prediction by the session's core (calibrated when a calibration exists)."""
        return self.predictor.predict(work)

    def band(self, prediction: "Prediction") -> Mapping[str, Any] | None:
        """The validated error band of the prediction's regime; None when not validated, so
        model error is not judged rather than judged against a band made up here."""
        return self.predictor.band(prediction.regime) if prediction.covered else None

    def judge(self, record: "CaseRecord", prediction: "Prediction", threshold: float | None,
              strict: bool | None) -> "Verdict":
        """The case's verdict under the store's rules; a marker's ``threshold`` or ``strict``
        overrides the session's (the threshold is checked there, naming the case). A failed
        write of the store is noted in the verdict and passed to ``on_store_error``, never raised."""
        from .store import evaluate_case

        def store_failed(error: StoreWriteError) -> None:
            if self.on_store_error is not None:
                self.on_store_error(record.id, error)

        return evaluate_case(
            record, self.store, self.target_key, prediction, self.band(prediction), self.provenance,
            threshold=self.threshold if threshold is None else threshold,
            strict=self.strict if strict is None else strict,
            accept_reason=self.accept_reason, save_new=self.save_new, on_write_error=store_failed)
