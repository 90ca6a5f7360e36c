"""The session's counter and energy sources, made on first use and kept in ``config.stash``."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .collect import CaseEvidence

if TYPE_CHECKING:
    from ..devices.base import Device

EVIDENCE_KEY = pytest.StashKey[CaseEvidence]()


def case_evidence(config: pytest.Config, device: "Device") -> CaseEvidence:
    """The sources for ``device`` (the bound one), opened once per session and closed with it."""
    evidence = config.stash.get(EVIDENCE_KEY, None)
    if evidence is None:
        mode = config.getoption("charz_counters", "auto") or "auto"
        evidence = CaseEvidence(device.backend, str(mode), getattr(device, "pci_bus_id", None))
        config.stash[EVIDENCE_KEY] = evidence
        config.add_cleanup(evidence.close)
    return evidence
