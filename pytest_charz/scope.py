"""Full runs and smoke runs: what a run's ``settings.scope`` says and how it is decided.

A **full** run measured every case the suites it was given collect, at the session's budgets.
A **smoke** run is anything less, and says why (``settings.scope_reasons``):

- quick mode (``--charz-quick``: short budgets, small parameter sets);
- a narrowed selection: a ``-k`` or ``-m`` expression, ``--deselect``, ``--lf``, ``--sw``, or
  node ids (``file.py::case``) among the arguments;
- a session told to stop early: ``-x`` or ``--maxfail``.

The two are kept apart: a full run is copied to ``latest.json`` (what the README's commands read),
any other run to ``latest-smoke.json``, and ``charz profile`` merges runs of one scope only.
Runs recorded before the scope existed are placed from their ``settings.quick`` and their
recorded command line (:func:`scope_of_run`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    import pytest

    from .records import Run

FULL = "full"
SMOKE = "smoke"
SCOPES = (FULL, SMOKE)
#: The copy of the latest run of each scope, beside the run files.
LATEST_NAMES = {FULL: "latest.json", SMOKE: "latest-smoke.json"}


def smoke_reasons(*, quick: bool = False, keyword: str = "", markexpr: str = "", deselect: Sequence[str] = (),
                  last_failed: bool = False, stepwise: bool = False, maxfail: int = 0,
                  args: Sequence[str] = ()) -> list[str]:
    """Why a session with these options is a smoke run (empty: it is a full run). ``args`` are
    the paths and node ids it was given; ``maxfail`` is pytest's (``-x`` sets 1, 0 is none)."""
    reasons = []
    if quick:
        reasons.append("--charz-quick")
    if keyword:
        reasons.append(f"a -k selection ({keyword!r})")
    if markexpr:
        reasons.append(f"a -m selection ({markexpr!r})")
    if deselect:
        reasons.append(f"{len(deselect)} case(s) deselected (--deselect)")
    if last_failed:
        reasons.append("only the last failures (--lf)")
    if stepwise:
        reasons.append("a stepwise session (--sw)")
    if maxfail:
        reasons.append(f"stops after {maxfail} failure(s) (-x/--maxfail)")
    node_ids = [arg for arg in args if "::" in arg]
    if node_ids:
        reasons.append(f"{len(node_ids)} node id(s) selected (e.g. {node_ids[0]})")
    return reasons


def smoke_reasons_of_config(config: "pytest.Config", quick: bool) -> list[str]:
    """:func:`smoke_reasons` of a live pytest session (its options, wherever they were set)."""
    def option(name: str, default: Any) -> Any:
        value = config.getoption(name, default)
        return default if value is None else value

    return smoke_reasons(quick=quick, keyword=str(option("keyword", "")), markexpr=str(option("markexpr", "")),
                         deselect=list(option("deselect", [])), last_failed=bool(option("lf", False)),
                         stepwise=bool(option("stepwise", False)), maxfail=int(option("maxfail", 0)),
                         args=[str(arg) for arg in config.args])


def smoke_reasons_of_argv(argv: Sequence[str], quick: bool) -> list[str]:
    """:func:`smoke_reasons` of a recorded command line (``python -m pytest ARGS...``), for runs
    recorded before the scope was: the options are read as pytest spells them."""
    keyword = markexpr = ""
    deselect: list[str] = []
    last_failed = stepwise = False
    maxfail = 0
    args: list[str] = []
    items = list(argv)
    index = 0
    while index < len(items):
        arg = items[index]
        following = items[index + 1] if index + 1 < len(items) else ""
        name, sep, inline = arg.partition("=")
        if arg in ("-k", "-m", "--deselect", "--maxfail"):
            value, index = following, index + 1
            if arg == "-k":
                keyword = value
            elif arg == "-m":
                markexpr = value
            elif arg == "--deselect":
                deselect.append(value)
            else:
                maxfail = int(value) if value.isdigit() else 1
        elif arg.startswith("-k") and len(arg) > 2 and not arg.startswith("--"):
            keyword = arg[2:]
        elif arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
            markexpr = arg[2:]
        elif sep and name == "--deselect":
            deselect.append(inline)
        elif sep and name == "--maxfail":
            maxfail = int(inline) if inline.isdigit() else 1
        elif arg in ("--lf", "--last-failed"):
            last_failed = True
        elif arg in ("--sw", "--stepwise"):
            stepwise = True
        elif arg in ("-x", "--exitfirst"):
            maxfail = 1
        elif not arg.startswith("-"):
            args.append(arg)
        index += 1
    return smoke_reasons(quick=quick, keyword=keyword, markexpr=markexpr, deselect=deselect,
                         last_failed=last_failed, stepwise=stepwise, maxfail=maxfail, args=args)


def scope_settings(reasons: Sequence[str]) -> dict[str, Any]:
    """The run settings that record a scope: ``{"scope": "full"}`` or ``{"scope": "smoke",
    "scope_reasons": [...]}``."""
    return {"scope": SMOKE, "scope_reasons": list(reasons)} if reasons else {"scope": FULL}


def scope_of_run(run: "Run | Mapping[str, Any]") -> tuple[str, list[str]]:
    """A run's scope and why: as recorded, else from its ``quick`` setting and command line."""
    settings = (run.get("settings") or {}) if isinstance(run, Mapping) else run.settings
    provenance = (run.get("provenance") or {}) if isinstance(run, Mapping) else run.provenance
    recorded = settings.get("scope")
    if recorded in SCOPES:
        return str(recorded), [str(reason) for reason in settings.get("scope_reasons") or ()]
    command = provenance.get("command") or []
    argv = [str(arg) for arg in command] if isinstance(command, (list, tuple)) else []
    if "pytest" in argv:
        argv = argv[argv.index("pytest") + 1:]
    reasons = smoke_reasons_of_argv(argv, bool(settings.get("quick")))
    return (SMOKE if reasons else FULL), reasons


def latest_name(scope: str, interrupted: bool = False) -> str:
    """The ``latest`` copy a run of ``scope`` goes to: an interrupted run is never the full one."""
    return LATEST_NAMES[FULL if scope == FULL and not interrupted else SMOKE]
