"""The plugin's own pytest hooks: backends, models and report sections.

A ``conftest.py`` at the root of the suite, or another installed pytest plugin, implements them
as ordinary hook functions::

    def pytest_charz_backends(register):
        register(MyBackend())            # --target=mine:NAME now binds through MyBackend

    def pytest_charz_models(register):
        register("my-model", MyModel)    # --charz-model=my-model

    def pytest_charz_report_sections(run):
        return [ReportSection("my checks", ("all good",))]

The plugin adds these specifications in ``pytest_addhooks``; pytest checks every implementation's
arguments against them. Implementations in a conftest below the root directory are found only
by the hooks called after collection (report sections); backends and models are asked for
while pytest configures, so they belong in the root conftest or a plugin.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import pytest

if TYPE_CHECKING:
    from .devices.base import Backend
    from .records import Run
    from .models.base import Model


@dataclass(frozen=True)
class ReportSection:
    """A block of the terminal summary that a ``pytest_charz_report_sections`` implementation
    adds: a section ``title`` and its ``lines``, printed as given (no wrapping)."""

    title: str
    lines: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.title, str) or not self.title:
            raise TypeError(f"ReportSection.title must be a non-empty string, got {self.title!r}")
        lines = (self.lines,) if isinstance(self.lines, str) else tuple(self.lines)
        bad = [line for line in lines if not isinstance(line, str)]
        if bad:
            raise TypeError(f"ReportSection.lines must be strings, got {bad[0]!r}")
        object.__setattr__(self, "lines", lines)


@pytest.hookspec
def pytest_charz_backends(register: "Callable[[Backend], None]") -> None:
    """Register device backends: ``register(backend)`` for each.

    Parameters
    ----------
    register
        Call it with an object following :class:`pytest_charz.devices.base.Backend`: its
        ``name`` is the target prefix it answers (``--target=NAME:REST`` is routed to it, REST
        going to ``backend.select``). A name already registered (the built-in ``cpu``, ``cuda``
        and ``rocm`` included) or an object that is not a Backend is a usage error.

    Notes
    -----
    Called once per pytest session (each pytest-xdist worker has its own), the first time the
    session binds its target: during ``pytest_configure`` when ``--target`` is given, else when
    the first case asks for the ``target``, ``device`` or ``charz`` fixture. The plugin
    registers the built-in backends through this hook too.
    """


@pytest.hookspec
def pytest_charz_models(register: "Callable[[str, Callable[[], Model]], None]") -> None:
    """Register performance models: ``register(name, factory)`` for each.

    Parameters
    ----------
    register
        Call it with a model name (non-empty, no ``:``) and a factory taking no arguments that
        returns a :class:`pytest_charz.models.base.Model`. It goes to
        :func:`pytest_charz.models.registry.register_model`: the name of a built-in model or of
        one already registered by another factory is a usage error. ``--charz-model=NAME`` then
        chooses it.

    Notes
    -----
    Called once per pytest session, from the plugin's ``pytest_configure``. The models are
    removed from the registry again when the session ends (``pytest_unconfigure``), so that a
    second session in the same process (``pytester``, ``pytest.main`` twice) may register them
    anew.
    """


@pytest.hookspec
def pytest_charz_report_sections(run: "Run") -> Sequence[ReportSection] | None:
    """Sections to print in the terminal summary, after the plugin's own.

    Parameters
    ----------
    run
        The finished run as recorded in the run file, typed (:class:`pytest_charz.records.Run`:
        ``target``, ``device``, ``provenance``, ``cases`` as ``CaseRecord``s; ``run.to_json()``
        is the file's JSON). Immutable.

    Returns
    -------
    A list of :class:`ReportSection` (or None for nothing). Each is printed as a terminal
    section titled ``section.title``, its lines below it.

    Notes
    -----
    Called once per session in ``pytest_terminal_summary``, only when the session measured at
    least one case (on the pytest-xdist controller: with the merged run of all workers).
    """
