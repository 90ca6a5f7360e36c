"""``charz init [DIR]``: lay out the characterization suites, their ``conftest.py`` and the
reference baselines in a directory, so that after ``pip install pytest-charz`` the commands of
the README run as they do in a checkout: ``charz init && pytest suites/``.

An installed wheel carries these files under ``pytest_charz/bundled/`` (the build step in
``setup.py`` puts them there); in a source checkout (an editable install) they are read from the
repository itself. Nothing is overwritten unless asked.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import CharzError, UsageError

#: What ``charz init`` lays out, relative to the repository root (the same patterns as the
#: build step in ``setup.py``, which a test keeps in agreement).
BUNDLED = ("conftest.py", "suites/*.py", "baselines/README.md", "baselines/*/*.json")


@dataclass(frozen=True)
class InitResult:
    """What ``charz init`` did: the directory, the files written (relative paths, sorted) and
    the files left as they were because they exist (without ``--force``)."""

    destination: Path
    written: tuple[str, ...]
    kept: tuple[str, ...]


def bundled_root() -> Path:
    """The directory the suites are copied from: the installed bundle, else the source checkout
    this package is imported from; CharzError when neither holds them."""
    package = Path(__file__).resolve().parent
    for root in (package / "bundled", package.parent):
        if (root / "conftest.py").is_file() and (root / "suites").is_dir() and (root / "baselines").is_dir():
            return root
    raise CharzError(f"this installation of pytest-charz carries no suites (looked in {package / 'bundled'} "
                     f"and {package.parent}); reinstall it from a wheel or a source checkout")


def bundled_files(root: Path) -> list[str]:
    """The files under ``root`` that :data:`BUNDLED` names, as sorted relative POSIX paths."""
    found = {path.relative_to(root).as_posix() for pattern in BUNDLED for path in root.glob(pattern)
             if path.is_file()}
    return sorted(found)


def init_project(destination: str | Path, force: bool = False, source: Path | None = None) -> InitResult:
    """Copy the suites, their conftest and the baselines from ``source`` (default:
    :func:`bundled_root`) into ``destination``, creating it. A file that exists there is kept
    unless ``force``; UsageError when ``destination`` is a file or is the source itself."""
    root = bundled_root() if source is None else source
    target = Path(destination)
    if target.exists() and not target.is_dir():
        raise UsageError(f"charz init: {str(target)!r} is a file, not a directory")
    if target.resolve() == root.resolve():
        raise UsageError(f"charz init: {str(target)!r} already is where the suites come from")
    written, kept = [], []
    try:
        for relative in bundled_files(root):
            destination_file = target / relative
            if destination_file.exists() and not force:
                kept.append(relative)
                continue
            destination_file.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / relative, destination_file)
            written.append(relative)
    except OSError as exc:
        raise CharzError(f"charz init: cannot write in {str(target)!r}: {exc}") from exc
    return InitResult(target, tuple(written), tuple(kept))


def summary_lines(result: InitResult) -> list[str]:
    """What ``charz init`` prints: counts per top-level entry, what was kept, the next command."""
    groups: dict[str, int] = {}
    for relative in result.written:
        head = relative.split("/", 1)[0]
        groups[head] = groups.get(head, 0) + 1
    where = str(result.destination)
    lines = [f"charz init: wrote {len(result.written)} file(s) in {where}"
             + (": " + ", ".join(head if head.endswith(".py") else f"{head}/ ({count})"
                                 for head, count in sorted(groups.items())) if groups else "")]
    if result.kept:
        lines.append(f"kept {len(result.kept)} file(s) that exist (--force overwrites them), e.g. {result.kept[0]}")
    prefix = "" if where in (".", "") else f"cd {where} && "
    lines.append(f"next: {prefix}pytest suites/ --charz-quick   (a short smoke run; drop --charz-quick for the full one)")
    return lines


def init_command(args: object) -> int:
    """``charz init [DIR] [--force]``: exit status 0 (errors go through ``run_command``)."""
    result = init_project(getattr(args, "directory", "."), force=bool(getattr(args, "force", False)))
    for line in summary_lines(result):
        print(line)
    return 0
