"""How long the characterization suites take: ``pytest suites/`` (or ``--charz-quick``) in a
subprocess, timed per suite file and in total, with every case that ran past 3x its budget.

    python benchmarks/suite_time.py            # the main job: within 180 s on a 2-vCPU guest
    python benchmarks/suite_time.py --quick    # the smoke run: within 30 s
    python benchmarks/suite_time.py -- -k memory   # pytest arguments after --

The suites run with the project's virtual environment (``.venv/bin/python``, else this
interpreter) into a temporary baseline store and run file (``--charz-baselines``,
``--charz-out``), so the repository's references are never touched; ``--keep DIR`` keeps them
(and the JUnit XML) there. Wall time per suite file is the sum of its tests' setup, call and
teardown times from pytest's JUnit XML; the rest of the total is collection, start-up and exit.
A case's own time is its measurement's ``elapsed_s`` in the run file (warm-up, sizing and
samples), compared with its ``settings.max_time_s``. The load average before and after is
printed with the figures: on a shared machine they are pessimistic.

Exit status: 0 when the total is within the limit (180 s, 30 s with ``--quick``, or
``--limit-s``) and no case took more than ``--factor`` (3) times its budget; 1 otherwise; 2 when
the suites wrote no run file.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
FULL_LIMIT_S = 180.0
QUICK_LIMIT_S = 30.0
BUDGET_FACTOR = 3.0


@dataclass(frozen=True)
class FileTime:
    """One suite file's tests in the JUnit XML: how many ran, skipped, failed, and their wall seconds."""

    path: str
    tests: int
    skipped: int
    failed: int
    wall_s: float


@dataclass(frozen=True)
class CaseTime:
    """One measured case of the run file: its id, suite file, measurement seconds and budget seconds."""

    id: str
    suite: str
    elapsed_s: float
    budget_s: float


def project_python(root: Path = ROOT) -> str:
    """The project's virtual environment's python, else this interpreter."""
    venv = root / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def pytest_command(python: str, workdir: Path, quick: bool, extra: Sequence[str] = ()) -> list[str]:
    """The measured command: the suites into ``workdir``'s baseline store, run file and JUnit XML."""
    command = [python, "-m", "pytest", "suites/", "-q", "-rs", "-p", "no:cacheprovider",
               f"--charz-baselines={workdir / 'baselines'}", f"--charz-out={workdir / 'run.json'}",
               f"--junitxml={workdir / 'junit.xml'}"]
    return command + (["--charz-quick"] if quick else []) + list(extra)


def _suite_path(classname: str, root: Path) -> str:
    """``suites.test_memory`` (or ``suites.test_memory.TestClass``) -> ``suites/test_memory.py``."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (root / candidate).exists():
            return candidate
    return "/".join(parts) + ".py"


def file_times(junit_xml: str, root: Path = ROOT) -> list[FileTime]:
    """Tests and wall seconds per suite file from pytest's JUnit XML, in the order they ran."""
    tree = ElementTree.parse(junit_xml)
    order: list[str] = []
    counts: dict[str, list[float]] = {}
    for case in tree.iter("testcase"):
        path = _suite_path(case.get("classname") or "", root)
        if path not in counts:
            order.append(path)
            counts[path] = [0, 0, 0, 0.0]
        entry = counts[path]
        entry[0] += 1
        entry[1] += case.find("skipped") is not None
        entry[2] += case.find("failure") is not None or case.find("error") is not None
        entry[3] += float(case.get("time") or 0.0)
    return [FileTime(path, int(c[0]), int(c[1]), int(c[2]), float(c[3])) for path, c in
            ((path, counts[path]) for path in order)]


def skip_reasons(junit_xml: str, words: str = "budget") -> list[tuple[str, str]]:
    """(test, reason) of the skipped tests whose reason mentions ``words``."""
    found = []
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        skipped = case.find("skipped")
        if skipped is not None and words in (skipped.get("message") or ""):
            found.append((f"{case.get('classname')}::{case.get('name')}", skipped.get("message") or ""))
    return found


def case_times(run_path: str) -> list[CaseTime]:
    """Each measured case's measurement time and budget, from the run file."""
    sys.path.insert(0, str(ROOT))
    from pytest_charz.run import load_run

    run = load_run(run_path)
    return [CaseTime(case.id, case.suite, case.measurement.elapsed_s, case.settings.max_time_s) for case in run.cases]


def over_budget(cases: Sequence[CaseTime], factor: float = BUDGET_FACTOR) -> list[CaseTime]:
    """The cases whose measurement took more than ``factor`` times their budget."""
    return [case for case in cases if case.elapsed_s > factor * case.budget_s]


def report_lines(files: Sequence[FileTime], cases: Sequence[CaseTime], total_s: float, limit_s: float,
                 factor: float, load_before: Sequence[float], load_after: Sequence[float]) -> list[str]:
    """The printed report: a row per suite file, the rest of the total, the cases over budget."""
    measuring: dict[str, float] = {}
    measured: dict[str, int] = {}
    for case in cases:
        measuring[case.suite] = measuring.get(case.suite, 0.0) + case.elapsed_s
        measured[case.suite] = measured.get(case.suite, 0) + 1
    width = max([len(f.path) for f in files] + [len("suite file")])
    lines = [f"{'suite file'.ljust(width)}  tests  skipped  failed  measured   wall s  measuring s"]
    for f in files:
        lines.append(f"{f.path.ljust(width)}  {f.tests:5d}  {f.skipped:7d}  {f.failed:6d}  {measured.get(f.path, 0):8d}"
                     f"  {f.wall_s:7.1f}  {measuring.get(f.path, 0.0):11.1f}")
    in_tests = sum(f.wall_s for f in files)
    lines.append(f"{'collection, start-up and exit'.ljust(width)}  {'':5s}  {'':7s}  {'':6s}  {'':8s}"
                 f"  {max(0.0, total_s - in_tests):7.1f}")
    lines.append(f"{'total'.ljust(width)}  {sum(f.tests for f in files):5d}  {sum(f.skipped for f in files):7d}"
                 f"  {sum(f.failed for f in files):6d}  {len(cases):8d}  {total_s:7.1f}  {sum(measuring.values()):11.1f}"
                 f"   (limit {limit_s:g} s: {'within' if total_s <= limit_s else 'OVER'})")
    lines.append("load average (1, 5, 15 min) before: " + " ".join(f"{x:.2f}" for x in load_before)
                 + "; after: " + " ".join(f"{x:.2f}" for x in load_after))
    over = over_budget(cases, factor)
    if over:
        lines.append(f"{len(over)} case(s) over {factor:g}x their budget:")
        lines += [f"  {case.id}: {case.elapsed_s:.2f} s, budget {case.budget_s:g} s ({case.elapsed_s / case.budget_s:.1f}x)"
                  for case in sorted(over, key=lambda c: -c.elapsed_s / c.budget_s)]
    else:
        worst = max(cases, key=lambda c: c.elapsed_s / c.budget_s, default=None)
        lines.append(f"no case over {factor:g}x its budget" + (
            f" (the most: {worst.id}, {worst.elapsed_s:.2f} s of {worst.budget_s:g} s)" if worst else ""))
    return lines


def exit_status(total_s: float, limit_s: float, cases: Sequence[CaseTime], factor: float) -> int:
    """0 within the limit and every budget, else 1."""
    return 0 if total_s <= limit_s and not over_budget(cases, factor) else 1


def _load() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="time `pytest suites/ --charz-quick` (limit 30 s)")
    parser.add_argument("--limit-s", type=float, default=None, help="fail above this total (default 180, quick 30)")
    parser.add_argument("--factor", type=float, default=BUDGET_FACTOR,
                        help="fail when a case's measurement takes more than this times its budget (default 3)")
    parser.add_argument("--keep", metavar="DIR", default=None,
                        help="write the baseline store, run file and JUnit XML here instead of a temporary directory")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest, after --")
    args = parser.parse_args(argv)
    limit_s = args.limit_s if args.limit_s is not None else (QUICK_LIMIT_S if args.quick else FULL_LIMIT_S)
    with tempfile.TemporaryDirectory(prefix="suite-time-") as scratch:
        workdir = Path(args.keep).resolve() if args.keep else Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        command = pytest_command(project_python(), workdir, args.quick, args.pytest_args)
        print("$ " + " ".join(command), flush=True)
        load_before = _load()
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        total_s = time.perf_counter() - start
        load_after = _load()
        tail = (done.stdout + done.stderr).strip().splitlines()
        print("\n".join(line for line in tail if line.startswith("SKIPPED") and "budget" in line))
        print(tail[-1] if tail else f"pytest printed nothing (exit {done.returncode})")
        run_path, junit = workdir / "run.json", workdir / "junit.xml"
        if not run_path.exists() or not junit.exists():
            print("\n".join(tail[-40:]))
            print(f"the suites wrote no run file or JUnit XML (pytest exit {done.returncode})")
            return 2
        files = file_times(str(junit))
        cases = case_times(str(run_path))
        print("\n".join(report_lines(files, cases, total_s, limit_s, args.factor, load_before, load_after)))
        if done.returncode not in (0, 1):
            print(f"pytest exited {done.returncode}")
        return exit_status(total_s, limit_s, cases, args.factor)


if __name__ == "__main__":
    sys.exit(main())
