"""Provenance of a run: host, OS, CPU, Python and library versions, suite commit, command, seeds."""
from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from typing import Any, Iterable, Mapping

LIBRARIES = ("pytest-charz", "pytest", "numpy", "scipy", "torch", "cupy-cuda12x", "cupy",
             "nvidia-ml-py", "amdsmi", "numba", "pytest-xdist", "hypothesis")


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str]:
    """Installed versions of ``names`` (absent ones left out); reads metadata, imports nothing."""
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def cpu_model(cpuinfo_text: str | None = None) -> str:
    if cpuinfo_text is None:
        try:
            with open("/proc/cpuinfo") as handle:
                cpuinfo_text = handle.read()
        except OSError:
            cpuinfo_text = ""
    for line in cpuinfo_text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def git_state(directory: str) -> dict[str, Any]:
    """Commit and dirtiness of the git work tree holding ``directory`` ({} outside git)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", directory, *args], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status), "branch": git("rev-parse", "--abbrev-ref", "HEAD")}


def collect(suite_dir: str, command: list[str], seeds: Mapping[str, int], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The provenance record of a run."""
    uname = platform.uname()
    return {
        "host": socket.gethostname(),
        "os": {"system": uname.system, "release": uname.release, "version": uname.version,
               "platform": platform.platform()},
        "cpu": {"model": cpu_model(), "machine": uname.machine, "logical_cpus": os.cpu_count()},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "libraries": library_versions(),
        "suite_git": git_state(suite_dir),
        "command": list(command),
        "seeds": dict(seeds),
        "environment": {k: v for k, v in os.environ.items()
                        if k.startswith(("OMP_", "MKL_", "OPENBLAS_", "CUDA_VISIBLE", "HIP_VISIBLE", "ROCR_VISIBLE", "CHARZ_"))},
        **(dict(extra) if extra else {}),
    }
