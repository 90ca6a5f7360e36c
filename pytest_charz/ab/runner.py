"""The real :class:`~pytest_charz.ab.session.RoundRunner`: one pytest process per side and round.

Each process runs the suites with the plugin's own options, writes its run file into the work
directory and keeps nothing in any baseline store (a throwaway directory, ``--charz-no-save``).
A side that is a git revision runs in a tree exported from that revision (``git archive``: the
repository, its index and its worktrees are left as they are), with the tree first on
``PYTHONPATH`` (and its ``src/`` when it has one) so the suites import that revision's code.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import UsageError
from ..formats import RUN
from ..measure import stats
from .judge import CaseSamples
from .session import Side

#: Lines of a failed process's output quoted in the error.
OUTPUT_TAIL_LINES = 15


def parse_assignments(values: Sequence[str], option: str) -> dict[str, str]:
    """``NAME=VALUE`` strings as a mapping; a UsageError naming ``option`` for anything else."""
    env: dict[str, str] = {}
    for value in values:
        name, sep, setting = value.partition("=")
        if not sep or not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise UsageError(f"{option} takes NAME=VALUE (an environment variable), e.g. CHARZ_EXTRA_WORK=1.1; "
                             f"got {value!r}")
        env[name] = setting
    return env


def export_revision(repository: str, revision: str, directory: str) -> str:
    """The tree of ``revision`` of the git repository at ``repository``, written into ``directory``
    (created); returns ``directory``. A UsageError names a revision git does not know."""
    os.makedirs(directory, exist_ok=True)
    archive = os.path.join(directory, ".revision.tar")
    with open(archive, "wb") as handle:
        done = subprocess.run(["git", "-C", repository, "archive", "--format=tar", revision],
                              stdout=handle, stderr=subprocess.PIPE, text=False)
    if done.returncode != 0:
        os.remove(archive)
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(f"git revision {revision!r} of {repository}: {reason[-1] if reason else 'git archive failed'}")
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(directory, filter="data")
        else:                                    # Python < 3.12 without the filters: git's own archive
            tar.extractall(directory)
    os.remove(archive)
    return directory


def case_samples(run_document: Mapping[str, Any]) -> dict[str, CaseSamples]:
    """Each measured case of a run file (already checked) as its kept samples, its core clock (the
    mean of the clock probe's readings before and after the case, when it ran), its flags and its
    reference kernel's median time (``measurement.pace``, when it ran)."""
    cases: dict[str, CaseSamples] = {}
    for case in run_document.get("cases") or ():
        measurement = case.get("measurement") or {}
        samples = tuple(float(v) for v in measurement.get("samples_s") or ())
        conditions = case.get("conditions") or {}
        clocks = [float(c) for c in ((conditions.get("before") or {}).get("core_clock_mhz"),
                                     (conditions.get("after") or {}).get("core_clock_mhz")) if c]
        flags = tuple(str(f) for f in case.get("flags") or ())
        pace = [float(v) for v in (measurement.get("pace") or {}).get("samples_s") or () if v and v > 0]
        cases[str(case["id"])] = CaseSamples(samples, sum(clocks) / len(clocks) if clocks else None, flags,
                                             stats.median(pace) if pace else None)
    return cases


@dataclass
class PytestRoundRunner:
    """Runs ``suites`` once per call in a fresh ``python -m pytest`` for the side asked.

    ``pytest_args`` go to every process (``--target=cpu``, ``-k ...``); ``max_time_s`` and
    ``noise`` become ``--charz-max-time`` and ``--charz-noise`` when given. Run files are written to
    ``workdir`` as ``round-<i>-<side>.json``.
    """

    suites: Sequence[str]
    workdir: str
    pytest_args: Sequence[str] = ()
    max_time_s: float | None = None
    noise: float | None = None
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def command(self, side: Side, out: str) -> list[str]:
        options = [f"--charz-max-time={self.max_time_s}"] if self.max_time_s is not None else []
        options += [f"--charz-noise={self.noise}"] if self.noise is not None else []
        return [side.python or sys.executable, "-m", "pytest", *self.suites, "-q", "-p", "no:cacheprovider",
                f"--charz-out={out}", f"--charz-baselines={os.path.join(self.workdir, 'throwaway-baselines')}",
                "--charz-no-save", *options, *self.pytest_args]

    def environment(self, side: Side) -> dict[str, str]:
        env = {**self.base_env, **side.env}
        if side.directory:
            paths = [side.directory] + ([os.path.join(side.directory, "src")]
                                        if os.path.isdir(os.path.join(side.directory, "src")) else [])
            env["PYTHONPATH"] = os.pathsep.join([*paths, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        return env

    def __call__(self, side: Side, round_index: int) -> Mapping[str, CaseSamples]:
        out = os.path.abspath(os.path.join(self.workdir, f"round-{round_index:03d}-{side.name}.json"))
        done = subprocess.run(self.command(side, out), env=self.environment(side), cwd=side.directory or None,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not os.path.exists(out):
            tail = "\n".join(done.stdout.strip().splitlines()[-OUTPUT_TAIL_LINES:])
            raise UsageError(f"side {side.name}, round {round_index + 1}: pytest exited {done.returncode} without "
                             f"writing its run file; its output ends:\n{tail}")
        return case_samples(RUN.load(out))


__all__ = ["PytestRoundRunner", "case_samples", "export_revision", "parse_assignments"]
