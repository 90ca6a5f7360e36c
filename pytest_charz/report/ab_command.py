"""``charz ab``: the suites of two revisions or two environments measured interleaved in one
session, each case's B/A ratio judged paired by round; text on stdout, JSON with ``--json``.

Exit status: 0 when no case is slower than A beyond the threshold, 1 when one is (the CI gate),
2 for a usage error.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
from typing import Any, Sequence

from ..ab.judge import CaseComparison
from ..ab.runner import PytestRoundRunner, export_revision, parse_assignments
from ..ab.session import (DEFAULT_ALPHA, DEFAULT_MAX_ROUNDS, DEFAULT_ROUNDS, AbResult, Side, check_rounds,
                          run_ab)
from ..errors import UsageError
from ..measure import clock
from ..formats import atomic_write_json, check_output_file
from ..verdict import check_alpha, check_threshold

EXIT_SLOWER = 1


def add_ab_options(parser: Any) -> None:
    """``charz ab``'s arguments and options."""
    parser.add_argument("suites", nargs="+", help="suite files or directories, as given to pytest")
    for side in ("a", "b"):
        upper = side.upper()
        parser.add_argument(f"--{side}-rev", default=None, metavar="REV",
                            help=f"git revision side {upper} runs, its tree exported (default: the working tree); "
                                 "suite paths are then taken in that tree, so run from the repository's root")
        parser.add_argument(f"--{side}-env", action="append", default=[], metavar="NAME=VALUE",
                            help=f"an environment variable of side {upper}'s processes; repeat for more")
        parser.add_argument(f"--{side}-python", default=None, metavar="PATH",
                            help=f"Python interpreter of side {upper} (another virtual environment; default: this one)")
    parser.add_argument("--repo", default=".", help="git repository of --a-rev / --b-rev (default: .)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"least rounds, one process per side each (default {DEFAULT_ROUNDS}); a 95%% CI over "
                             "rounds needs 6, a 99%% one 8")
    parser.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS,
                        help=f"most rounds: the session stops earlier once every case is decided (default "
                             f"{DEFAULT_MAX_ROUNDS})")
    parser.add_argument("--threshold", type=float, default=0.05,
                        help="B/A change that counts: slower beyond 1 + threshold fails (default 0.05)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help=f"1 - the confidence level of the interval over rounds (default {DEFAULT_ALPHA}: "
                             f"{1 - DEFAULT_ALPHA:.0%})".replace("%", "%%"))
    parser.add_argument("--max-time", type=float, default=None, metavar="SECONDS",
                        help="time budget of one case in each process (--charz-max-time; default: the suite's)")
    parser.add_argument("--noise", type=float, default=None, metavar="FRACTION",
                        help="noise target of one case in each process (--charz-noise; default: the suite's)")
    parser.add_argument("--pytest-args", default="", metavar="ARGS",
                        help="more pytest arguments for every process, one string (e.g. '--target=cpu -k gemm')")
    parser.add_argument("--sequential", action="store_true",
                        help="run each round's two processes one after the other instead of interleaved (taking "
                             "turns slice by slice of each case's samples, the default)")
    parser.add_argument("--pin-cpu", type=int, default=None, metavar="CPU",
                        help="run both sides' processes on this one CPU (os.sched_setaffinity); for single-threaded "
                             "cases on a machine whose CPUs differ or are shared unevenly")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the comparison as JSON here")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="keep every process's run file (and exported revisions) in DIR")


def check_ab_arguments(args: argparse.Namespace) -> None:
    """Every option checked before the first process starts (UsageError naming it)."""
    check_rounds(args.rounds, args.max_rounds)
    check_threshold(args.threshold)
    check_alpha(args.alpha)
    if args.max_time is not None and not args.max_time > 0:
        raise UsageError(f"--max-time must be a positive number of seconds; got {args.max_time!r}")
    if args.noise is not None and not 0 < args.noise < 1:
        raise UsageError(f"--noise must be a fraction in (0, 1), e.g. 0.01; got {args.noise!r}")
    extra = shlex.split(args.pytest_args)
    if not args.sequential and any(a in ("-n", "--numprocesses", "--dist") or a.startswith(("-n", "--numprocesses=", "--dist="))
                                   for a in extra if a not in ("-no:cacheprovider",)):
        raise UsageError("--pytest-args: pytest-xdist workers cannot take turns with the other side (the turn pipe "
                         "is the main process's): drop -n, or run the rounds one after the other with --sequential")
    if args.pin_cpu is not None:
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        if args.pin_cpu not in allowed:
            raise UsageError(f"--pin-cpu {args.pin_cpu}: this process may run on CPUs {sorted(allowed)} only"
                             if allowed else "--pin-cpu needs os.sched_setaffinity, which this platform lacks")
    if args.json:
        check_output_file(args.json, "--json")
    for side in ("a", "b"):
        python = getattr(args, f"{side}_python")
        if python and not os.access(python, os.X_OK):
            raise UsageError(f"--{side}-python: {python} is not an executable interpreter")


def describe(rev: str | None, env: dict[str, str], python: str | None) -> str:
    parts = [f"rev {rev}"] if rev else []
    parts += [f"{name}={value}" for name, value in sorted(env.items())]
    parts += [f"python {python}"] if python else []
    return ", ".join(parts) or "the working tree as it is"


def build_sides(args: argparse.Namespace, workdir: str) -> tuple[Side, Side]:
    sides = []
    for side in ("a", "b"):
        rev, python = getattr(args, f"{side}_rev"), getattr(args, f"{side}_python")
        env = parse_assignments(getattr(args, f"{side}_env"), f"--{side}-env")
        directory = export_revision(args.repo, rev, os.path.join(workdir, f"tree-{side}")) if rev else None
        sides.append(Side(side.upper(), describe(rev, env, python), env, python, directory))
    return sides[0], sides[1]


def format_comparison(comparison: CaseComparison) -> str:
    decision = comparison.decision
    if decision is None:
        return f"  {comparison.outcome:<12} {comparison.case_id}: not measured on both sides"
    ci = f"[{decision.ci[0]:.3f}-{decision.ci[1]:.3f}]" if decision.ci else "[CI unknown]"
    basis = f", {comparison.basis}" if comparison.basis != "raw" else ""
    return (f"  {comparison.outcome:<12} B/A {decision.ratio:6.3f} {ci} {comparison.rounds:3d} rounds{basis}  "
            f"{comparison.case_id}")


def format_result(result: AbResult) -> str:
    a, b = result.sides
    level = 1.0 - result.alpha
    lines = [f"charz ab: A = {a.description}; B = {b.description}",
             f"{len(result.rounds)} rounds ({result.stopped}), {2 * len(result.rounds)} processes "
             f"({result.mode}), "
             f"{result.elapsed_s:.0f} s; B/A with its {level:.0%} CI over rounds; threshold +-{result.threshold:.1%}"]
    for comparison in result.comparisons:
        lines.append(format_comparison(comparison))
        if comparison.outcome in ("slower", "inconclusive"):
            # The evidence under the cases a reader has to act on or rerun.
            lines += [f"      {line}" for line in comparison.message.splitlines()]
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(result.counts().items()))
    lines.append(f"{len(result.comparisons)} cases: {counts}"
                 + ("; FAILED: a case is slower beyond the threshold" if result.fails else ""))
    return "\n".join(lines)


def ab_command(args: argparse.Namespace, runner_factory: Any = PytestRoundRunner) -> int:
    """Run the A/B session ``args`` describe; print it, write ``--json``, return the exit status."""
    check_ab_arguments(args)
    keep = os.path.abspath(args.keep) if args.keep else None
    if keep:
        os.makedirs(keep, exist_ok=True)
    with contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory(prefix="charz-ab-") as workdir:
        assert workdir is not None
        sides = build_sides(args, workdir)
        # Suite paths are relative to where each side runs: here, or a revision's exported tree.
        runner = runner_factory(list(args.suites), workdir, shlex.split(args.pytest_args), args.max_time, args.noise,
                                interleaved=not args.sequential,
                                pin_cpus={args.pin_cpu} if args.pin_cpu is not None else None)

        def progress(index: int, comparisons: Sequence[CaseComparison]) -> None:
            decided = sum(c.outcome != "inconclusive" for c in comparisons)
            print(f"round {index + 1}: {decided} of {len(comparisons)} cases decided", file=sys.stderr, flush=True)

        result = run_ab(sides, runner, args.rounds, args.max_rounds, args.threshold, args.alpha, progress,
                        lambda: clock.now_ns() / 1e9)
    if not result.comparisons:
        raise UsageError(f"no case was measured on either side: do {' '.join(args.suites)} hold charz cases?")
    print(format_result(result))
    if args.json:
        atomic_write_json(args.json, result.to_json())
        print(f"comparison: {args.json}")
    return EXIT_SLOWER if result.fails else 0


__all__ = ["EXIT_SLOWER", "ab_command", "add_ab_options", "format_result"]
