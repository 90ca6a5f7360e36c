"""Validating the project's TOML data files (the target catalogue, the model configurations).

:class:`TableReader` holds the checks both readers share; every error is a ``SpecError`` that
names the file, the field path and the bad value, and an unknown field names the nearest known
one. The readers of each kind of file add their own fields on top.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from .errors import SpecError


T = TypeVar("T")


def load_named_files(directory: str | Path, load: Callable[[Path], T], names: Callable[[T], Iterable[str]],
                     taken: Mapping[str, str] | None = None, fold: Callable[[str], str] = str) -> dict[str, T]:
    """Every ``*.toml`` of ``directory``, loaded by ``load``, by its first name; the names of all
    files (``names``: the id, then the aliases) must be unique once ``fold`` is applied, and none
    may be one of ``taken`` (name -> who has it). A clash is a ``SpecError`` naming both."""
    loaded: dict[str, T] = {}
    owner: dict[str, str] = dict(taken or {})
    for path in sorted(Path(directory).glob("*.toml")):
        item = load(path)
        item_names = list(names(item))
        for name in item_names:
            if fold(name) in owner:
                raise SpecError(f"{path}: the name {name!r} is already taken by {owner[fold(name)]}")
            owner[fold(name)] = str(path)
        loaded[item_names[0]] = item
    return loaded


def join_field(field: str, key: str) -> str:
    """``field.key``, or ``key`` at the top of the file."""
    return f"{field}.{key}" if field else key


def nearest_hint(name: str, known: Iterable[str], cutoff: float = 0.4) -> str:
    """``"; did you mean 'x'?"`` for the known name nearest ``name``, else ``""``."""
    nearest = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return f"; did you mean {nearest[0]!r}?" if nearest else ""


class TableReader:
    """Checks over one parsed file; every error names the file, the field path and the value."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, field: str, problem: str, value: Any) -> SpecError:
        return SpecError(f"{self.path}: {field} {problem}, got {value!r}")

    def table(self, data: Any, field: str, required: tuple[str, ...],
              optional: tuple[str, ...] = ()) -> dict[str, Any]:
        """``data`` if it is a table with all of ``required`` and nothing outside ``optional``."""
        if not isinstance(data, dict):
            raise self.fail(field or "the file", "must be a table", data)
        known = required + optional
        for key in data:
            if key not in known:
                raise self.fail(join_field(field, key),
                                f"is not a known field (known: {', '.join(known)}){nearest_hint(key, known)}",
                                data[key])
        for key in required:
            if key not in data:
                raise SpecError(f"{self.path}: {join_field(field, key)} is missing")
        return data

    def text(self, data: Mapping[str, Any], key: str, field: str, default: str | None = None) -> str:
        if key not in data and default is not None:
            return default
        value = data[key]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(join_field(field, key), "must be a non-empty string", value)
        return value

    def choice(self, data: Mapping[str, Any], key: str, field: str, choices: tuple[str, ...]) -> str:
        value = self.text(data, key, field)
        if value not in choices:
            raise self.fail(join_field(field, key), f"must be one of {', '.join(choices)}", value)
        return value

    def texts(self, data: Mapping[str, Any], key: str, field: str) -> tuple[str, ...]:
        value = data.get(key, [])
        if not isinstance(value, list):
            raise self.fail(join_field(field, key), "must be a list of strings", value)
        for index, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise self.fail(f"{join_field(field, key)}[{index}]", "must be a non-empty string", item)
        return tuple(value)
