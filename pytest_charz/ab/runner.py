"""The real :class:`~pytest_charz.ab.session.RoundRunner`: one pytest process per side and round.

A round is interleaved by default: both processes start together and take turns slice by slice
of each case's samples (:mod:`pytest_charz.ab.referee`), so A and B of a case are timed within
milliseconds of each other on the same machine; ``interleaved=False`` runs them one after the
other (in :func:`~pytest_charz.ab.session.round_order`), each case's two measurements then
seconds apart.

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
from .referee import run_interleaved
from .session import Side, round_order

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
    interleaved: bool = True
    pin_cpus: set[int] | None = None

    def command(self, side: Side, out: str) -> list[str]:
        options = [f"--charz-max-time={self.max_time_s}"] if self.max_time_s is not None else []
        options += [f"--charz-noise={self.noise}"] if self.noise is not None else []
        return [side.python or sys.executable, "-m", "pytest", *self.suites, "-q", "-p", "no:cacheprovider",
                f"--charz-out={out}", f"--charz-baselines={os.path.join(self.workdir, 'throwaway-baselines')}",
                "--charz-no-save", *options, *self.pytest_args]

    def run_file(self, side: Side, round_index: int) -> str:
        return os.path.abspath(os.path.join(self.workdir, f"round-{round_index:03d}-{side.name}.json"))

    def environment(self, side: Side) -> dict[str, str]:
        env = {**self.base_env, **side.env}
        if side.directory:
            paths = [side.directory] + ([os.path.join(side.directory, "src")]
                                        if os.path.isdir(os.path.join(side.directory, "src")) else [])
            env["PYTHONPATH"] = os.pathsep.join([*paths, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        # Each side its own device lock: interleaved, the sides take turns by the referee, and one
        # holding the lock while it waits its turn would stop the other for good.
        env["CHARZ_LOCK_DIR"] = os.path.join(os.path.abspath(self.workdir), f"locks-{side.name}")
        os.makedirs(env["CHARZ_LOCK_DIR"], exist_ok=True)
        return env

    def measure_round(self, sides: tuple[Side, Side], round_index: int
                      ) -> tuple[Mapping[str, CaseSamples], Mapping[str, CaseSamples]]:
        """Both sides' samples of round ``round_index``: interleaved, or one process after the other."""
        if not self.interleaved:
            result: list[Mapping[str, CaseSamples]] = [{}, {}]
            for index in round_order(round_index):
                result[index] = self(sides[index], round_index)
            return result[0], result[1]
        outs = [self.run_file(side, round_index) for side in sides]
        logs = [out[: -len(".json")] + ".log" for out in outs]
        handles = [open(log, "wb") for log in logs]
        try:
            # The order the processes start in alternates by round too (ABBA), as the turns do.
            order = round_order(round_index)
            finished = run_interleaved([self.command(sides[i], outs[i]) for i in order],
                                       [self.environment(sides[i]) for i in order],
                                       [sides[i].directory for i in order], [handles[i] for i in order],
                                       self.pin_cpus)
        finally:
            for handle in handles:
                handle.close()
        codes = {order[position]: done.returncode for position, done in enumerate(finished)}
        samples = []
        for index, side in enumerate(sides):
            samples.append(self.load(side, round_index, outs[index], codes[index], open(logs[index], errors="replace").read()))
        return samples[0], samples[1]

    def load(self, side: Side, round_index: int, out: str, returncode: int, output: str) -> Mapping[str, CaseSamples]:
        if not os.path.exists(out):
            tail = "\n".join(output.strip().splitlines()[-OUTPUT_TAIL_LINES:])
            raise UsageError(f"side {side.name}, round {round_index + 1}: pytest exited {returncode} without "
                             f"writing its run file; its output ends:\n{tail}")
        return case_samples(RUN.load(out))

    def __call__(self, side: Side, round_index: int) -> Mapping[str, CaseSamples]:
        """One process of ``side`` alone (a round run one side after the other)."""
        out = self.run_file(side, round_index)
        done = subprocess.run(self.command(side, out), env=self.environment(side), cwd=side.directory or None,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return self.load(side, round_index, out, done.returncode, done.stdout)


__all__ = ["PytestRoundRunner", "case_samples", "export_revision", "parse_assignments"]
