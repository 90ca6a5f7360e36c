"""Where a baseline lives: the target's directory key and the suite's file name."""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import UsageError

if TYPE_CHECKING:
    from ..records import Run
    from ..targets.spec import TargetSpec


def _sanitize(name: str, what: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")
    if not cleaned:
        raise UsageError(f"{what} {name!r} gives an empty file name")
    return cleaned


def suite_module(suite: str) -> str:
    """The baseline file's name for a suite: the stem of its module path, sanitized."""
    stem = os.path.splitext(os.path.basename(suite.replace("\\", "/").rstrip("/")))[0]
    return _sanitize(stem, "suite")


def target_directory(target_id: str) -> str:
    """The directory name of a target key, safe on every file system."""
    return _sanitize(target_id, "target id")


def target_key(target_id: str, kind: str, name: str) -> str:
    """The baseline directory of a target. The host CPU is keyed by its model name, since
    references of one CPU say nothing about another."""
    if kind == "cpu" and target_id == "cpu":
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        return f"cpu-{slug}" if slug else "cpu"
    return target_id


def store_target_key(spec: "TargetSpec") -> str:
    """The baseline directory of the target ``spec`` describes."""
    return target_key(spec.id, spec.identity.kind, spec.identity.name)


def run_target_key(run: "Run | Mapping[str, Any]") -> str:
    """The baseline directory of the target a run (typed, or its JSON) was measured on."""
    if isinstance(run, Mapping):
        target = run.get("target") or {}
        return target_key(str(target.get("id", "")), str(target.get("kind", "")), str(target.get("name", "")))
    return target_key(run.target.id, run.target.kind, run.target.name)


__all__ = ["run_target_key", "store_target_key", "suite_module", "target_directory", "target_key"]
