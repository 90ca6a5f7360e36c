"""The project's own errors and the small argument checks that raise them."""
from __future__ import annotations

from typing import Any, Iterable


class CharzError(Exception):
    """Base of every error pytest-charz raises on purpose."""


class UsageError(CharzError):
    """The user asked for something that cannot be done as asked (bad option, unknown target)."""


class SpecError(CharzError):
    """A target description file is malformed; the message names the file, field and value."""


class FormatError(CharzError):
    """A versioned JSON file (run, profile, baseline) is corrupt or of an unknown version."""


class MissingExtraError(CharzError, ImportError):
    """An optional dependency is missing; the message names the extra that installs it."""


def require_extra(module: str, extra: str) -> Any:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``pip install pytest-charz[extra]``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module!r} is needed here but is not installed; "
            f"install it with: pip install 'pytest-charz[{extra}]'"
        ) from exc


def check_positive(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise UsageError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def check_non_negative(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise UsageError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    options = list(choices)
    if value not in options:
        raise UsageError(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}")
    return value
