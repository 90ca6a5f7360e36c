"""Provenance of a run: host, OS, CPU, Python and library versions, suite commit, command, seeds.

The ``cpu`` record names the machine's CPU (``model``, ``machine``, ``logical_cpus``) and, where
/proc and /sys can be read, its ``identity`` (``targets/identity.py``: vendor, family/model/
stepping, full model name, result-changing ISA features, native dtypes, cache sizes per level,
cores) and that identity's ``fingerprint``, whatever the target is (a GPU run's host CPU too).
"""
from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from ..targets.spec import CpuIdentity

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


#: SIMD width in bits of the kernels of each OpenBLAS core type (``OPENBLAS_CORETYPE``, threadpoolctl's
#: ``architecture``), lower-case; a core type not listed has an unknown width.
OPENBLAS_CORE_VECTOR_BITS = {
    "prescott": 128, "core2": 128, "penryn": 128, "dunnington": 128, "nehalem": 128, "atom": 128,
    "barcelona": 128, "opteron": 128, "bobcat": 128, "sandybridge": 256, "bulldozer": 256, "piledriver": 256,
    "steamroller": 256, "excavator": 256, "haswell": 256, "zen": 256, "skylakex": 512, "cooperlake": 512,
    "sapphirerapids": 512, "armv8": 128, "neoversen1": 128, "neoversev1": 256, "a64fx": 512,
}


def core_vector_bits(core_type: str | None) -> int | None:
    """SIMD bits of an OpenBLAS core type's kernels (``Haswell`` -> 256), None when unknown."""
    return OPENBLAS_CORE_VECTOR_BITS.get(core_type.lower()) if core_type else None


def blas_info() -> list[dict[str, Any]]:
    """The BLAS libraries loaded in this process, as threadpoolctl reports them: library
    (``internal_api``), version, kernel core type (``architecture``, OpenBLAS and BLIS), threads,
    threading layer and the kernels' SIMD width in bits where the core type says it. Empty when
    threadpoolctl is missing or no BLAS is loaded (it inspects loaded libraries, imports none)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    found = []
    for pool in threadpool_info():
        if pool.get("user_api") != "blas":
            continue
        core = pool.get("architecture")
        found.append({"internal_api": pool.get("internal_api"), "version": pool.get("version"),
                      "architecture": core, "num_threads": pool.get("num_threads"),
                      "threading_layer": pool.get("threading_layer"), "vector_bits": core_vector_bits(core)})
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


def cpu_record(identity: "CpuIdentity | None" = None, cpuinfo_text: str | None = None) -> dict[str, Any]:
    """The provenance's ``cpu`` record: model name, machine, logical CPUs and, with ``identity``
    (default: this machine's, read from /proc and /sys; left out where they cannot be parsed),
    its identity document and fingerprint. ``cpuinfo_text`` stands for /proc/cpuinfo's text."""
    from ..targets.identity import cpu_identity_document

    record: dict[str, Any] = {"model": cpu_model(cpuinfo_text), "machine": platform.machine(),
                              "logical_cpus": os.cpu_count()}
    if identity is None:
        from ..targets.host import read_host_identity

        try:
            identity = read_host_identity()
        except (OSError, ValueError):  # an unreadable sysfs cache size: the rest is still recorded
            identity = None
    if identity is not None:
        document = cpu_identity_document(identity)
        record["identity"] = document
        record["fingerprint"] = document["fingerprint"]
    return record


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
    """The provenance record of a run (its ``cpu`` record is :func:`cpu_record`'s)."""
    uname = platform.uname()
    return {
        "host": socket.gethostname(),
        "os": {"system": uname.system, "release": uname.release, "version": uname.version,
               "platform": platform.platform()},
        "cpu": cpu_record(),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "libraries": library_versions(),
        "suite_git": git_state(suite_dir),
        "command": list(command),
        "seeds": dict(seeds),
        "environment": {k: v for k, v in os.environ.items()
                        if k.startswith(("OMP_", "MKL_", "OPENBLAS_", "CUDA_VISIBLE", "HIP_VISIBLE", "ROCR_VISIBLE", "CHARZ_"))},
        "blas": blas_info(),
        **(dict(extra) if extra else {}),
    }
