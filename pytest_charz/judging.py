"""Per-case prediction and verdict inside a pytest session: the model, the stored reference,
the calibrated error band of the case's regime, and the store's rules."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

from .options import DEFAULT_THRESHOLD
from .store import store_target_key

if TYPE_CHECKING:
    import pytest

    from .models.base import Prediction
    from .records import CaseRecord
    from .targets.spec import TargetSpec
    from .verdict import Verdict
    from .work import Work


class CaseJudge:
    """Predicts and judges the cases of one session."""

    def __init__(self, config: "pytest.Config", spec: "TargetSpec", provenance: Mapping[str, Any]) -> None:
        from .models.registry import DEFAULT_MODEL, get_model
        from .models.ceilings import Ceilings
        from .store import DirectoryStore

        self.spec = spec
        self.target_key = store_target_key(spec)
        root = config.getoption("charz_baselines") or os.path.join(str(config.rootpath), "baselines")
        self.store = DirectoryStore(root)
        self.model = get_model(config.getoption("charz_model") or DEFAULT_MODEL)
        ceilings = Ceilings.from_spec(spec)
        profile_path = config.getoption("charz_profile")
        if profile_path:
            from .prediction import read_profile
            from .session import PROFILE_KEY

            # Read and checked once, when the session was configured (a bad file is a usage error).
            profile = config.stash.get(PROFILE_KEY, None) or read_profile(profile_path)
            ceilings = Ceilings.from_profile(profile).filled_from(ceilings)
        self.ceilings = ceilings
        self.calibration_file = self._load_calibration(root)
        threshold = config.getoption("charz_threshold")
        self.threshold = DEFAULT_THRESHOLD if threshold is None else float(threshold)
        self.strict = bool(config.getoption("charz_strict"))
        self.accept_reason = config.getoption("charz_accept")
        save = config.getoption("charz_save_new")
        self.save_new = (not config.getoption("charz_quick")) if save is None else bool(save)
        self.provenance = provenance

    def _load_calibration(self, root: str) -> Any:
        """The calibration of this model on this target (``charz calibrate`` writes it next to
        the baselines), or None."""
        path = os.path.join(root, self.target_key, f"calibration-{self.model.name}.json")
        if not os.path.exists(path):
            return None
        from .calibration.file import load_calibration_file

        return load_calibration_file(path)

    def predict(self, work: "Work") -> "Prediction":
        """The calibrated prediction when a calibration exists (its ceilings include the measured
        figures it was fitted with), else the model on the spec's (or profile's) ceilings."""
        if self.calibration_file is not None:
            return self.calibration_file.predict(work)
        return self.model.predict(work, self.ceilings)

    def band(self, prediction: "Prediction") -> Mapping[str, Any] | None:
        """The validated error band of the prediction's regime; None when not validated, so
        model error is not judged rather than judged against a band made up here."""
        if not prediction.covered or self.calibration_file is None:
            return None
        return self.calibration_file.bands.get(prediction.regime)

    def judge(self, record: "CaseRecord", prediction: "Prediction", threshold: float | None,
              strict: bool | None) -> "Verdict":
        """The case's verdict under the store's rules; a marker's ``threshold`` or ``strict``
        overrides the session's (the threshold is checked there, naming the case)."""
        from .store import evaluate_case

        return evaluate_case(
            record, self.store, self.target_key, prediction, self.band(prediction), self.provenance,
            threshold=self.threshold if threshold is None else threshold,
            strict=self.strict if strict is None else strict,
            accept_reason=self.accept_reason, save_new=self.save_new)
