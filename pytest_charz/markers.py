"""The ``charz`` marker of a case: its sampler and verdict settings, most specific mark last."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from .errors import UsageError

if TYPE_CHECKING:
    from .measure.sampler import SamplerSettings

VERDICT_KEYS = ("threshold", "strict")
MARKER_KEYS = {
    "noise": "noise_target",
    "mode": "mode",
    "max_time": "max_time_s",
    "min_samples": "min_samples",
    "max_samples": "max_samples",
    "min_time": "min_time_s",
    "warmup": "warmup_s",
}


def _charz_marks(node: pytest.Item) -> list[Any]:
    """The case's ``charz`` marks, farthest first: module, class, function, then the marks of
    its ``pytest.param(...)`` (the most specific, so they win over the function's)."""
    callspec = getattr(node, "callspec", None)
    param_marks = [m for m in (callspec.marks if callspec is not None else []) if m.name == "charz"]
    others = [m for m in node.iter_markers("charz") if not any(m is p for p in param_marks)]
    return [*reversed(others), *param_marks]


def marker_verdict_settings(node: pytest.Item) -> dict[str, Any]:
    """The case's verdict settings (``threshold``, ``strict``) from its ``charz`` markers."""
    found: dict[str, Any] = {}
    for mark in _charz_marks(node):
        found.update({k: v for k, v in mark.kwargs.items() if k in VERDICT_KEYS})
    return found


def marker_settings(node: pytest.Item, base: "SamplerSettings", quick: bool) -> "SamplerSettings":
    """Apply the case's ``charz`` markers (most specific last) to the session's settings; in
    quick runs the markers' ``quick={...}`` settings then apply on top."""
    changes: dict[str, Any] = {}
    quick_changes: dict[str, Any] = {}
    for mark in _charz_marks(node):
        if mark.args:
            raise UsageError(f"{node.nodeid}: @pytest.mark.charz takes keyword arguments only, got {mark.args!r}")
        for key, value in mark.kwargs.items():
            if key == "quick":
                if quick:
                    quick_changes.update({MARKER_KEYS[k]: v for k, v in dict(value).items() if k in MARKER_KEYS})
                continue
            if key in VERDICT_KEYS:
                continue
            if key not in MARKER_KEYS:
                raise UsageError(
                    f"{node.nodeid}: unknown @pytest.mark.charz setting {key!r}; known: "
                    f"{', '.join(sorted([*MARKER_KEYS, *VERDICT_KEYS, 'quick']))}")
            changes[MARKER_KEYS[key]] = value
    changes.update(quick_changes)
    if node.config.getoption("charz_noise") is not None:
        changes.pop("noise_target", None)     # the command line wins over the suite
    if node.config.getoption("charz_max_time") is not None:
        changes.pop("max_time_s", None)
    return base.updated(**changes)
