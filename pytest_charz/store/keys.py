"""Where a baseline lives: the target's directory key and the suite's file name."""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import UsageError
from ..targets.identity import check_fingerprint, cpu_fingerprint

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


def _is_host(target_id: str, kind: str) -> bool:
    return kind == "cpu" and target_id == "cpu"


def target_key(target_id: str, kind: str, name: str, fingerprint: str = "") -> str:
    """The baseline directory of a target. The host CPU (id ``cpu``) is keyed by its model name
    and the fingerprint of its identity (``cpu-amd-epyc-1a2b3c4d``), since references of one CPU
    say nothing about another, and one model name may cover several CPU generations; without a
    fingerprint, by its name alone. ``fingerprint``: 8 lower-case hex digits or empty (UsageError
    otherwise); it is ignored for other targets, keyed by their id."""
    check_fingerprint(fingerprint)
    if _is_host(target_id, kind):
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        key = f"cpu-{slug}" if slug else "cpu"
        return f"{key}-{fingerprint}" if fingerprint else key
    return target_id


def store_target_key(spec: "TargetSpec") -> str:
    """The baseline directory of the target ``spec`` describes; for the host CPU, with the
    fingerprint of the CPU (:func:`~pytest_charz.targets.identity.cpu_fingerprint`: of its
    identity, or of what a spec recorded before identities existed holds)."""
    kind = spec.identity.kind
    fingerprint = cpu_fingerprint(spec) if _is_host(spec.id, kind) else ""
    return target_key(spec.id, kind, spec.identity.name, fingerprint)


def run_target_key(run: "Run | Mapping[str, Any]") -> str:
    """The baseline directory of the target a run (typed, or its JSON) was measured on: the
    :func:`store_target_key` of the spec it recorded, whatever its age; a run without a spec
    is keyed by its target's id, kind and name. FormatError when the recorded spec is malformed."""
    if isinstance(run, Mapping):
        target = run.get("target") or {}
        if target.get("spec"):
            from ..targets.spec import TargetSpec

            return store_target_key(TargetSpec.from_json(target["spec"], "the run's target spec"))
        return target_key(str(target.get("id", "")), str(target.get("kind", "")), str(target.get("name", "")))
    if run.target.spec is not None:
        return store_target_key(run.target.spec)
    return target_key(run.target.id, run.target.kind, run.target.name)


__all__ = ["run_target_key", "store_target_key", "suite_module", "target_directory", "target_key"]
