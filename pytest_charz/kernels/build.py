"""Compile C kernels at first use and cache the result.

A source file is compiled with the system C compiler (``$CC``, else ``cc``, else ``gcc``) into a
shared library (or a program) under ``$XDG_CACHE_HOME/pytest-charz/kernels/`` (``~/.cache`` when
the variable is unset). The file name is a hash of the source, the flags, the compiler's version
and the host CPU's feature flags, so a changed source, compiler or machine never loads a stale
build. Builds go to a temporary file in the cache directory and are renamed into place, so
concurrent processes (pytest-xdist workers) racing on the same build all end up loading a
complete file.

OpenMP is asked for first; when the compiler cannot build with ``-fopenmp`` the build falls back
to one without it, and :attr:`BuiltArtifact.openmp` says which one was made.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from ..errors import CharzError

#: Flags every kernel build uses. ``-fno-tree-loop-distribute-patterns`` keeps copy loops as
#: loops instead of calls to the C library's ``memcpy``, whose large-size path may use
#: non-temporal stores and would change what a STREAM copy measures.
BASE_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fno-tree-loop-distribute-patterns")
OPENMP_FLAGS: tuple[str, ...] = ("-fopenmp",)
LIBRARY_FLAGS: tuple[str, ...] = ("-fPIC", "-shared")

_INSTALL_HINT = "install a C compiler (for example `apt-get install gcc` or `dnf install gcc`)"


@dataclass(frozen=True)
class Compiler:
    """The C compiler a build uses: its command and the first line of its ``--version``."""

    command: str
    version: str


@dataclass(frozen=True)
class BuiltArtifact:
    """A compiled kernel file: where it is, how it was built, and whether this call built it."""

    path: Path
    compiler: Compiler
    flags: tuple[str, ...]
    openmp: bool
    compiled_now: bool


def cache_dir() -> Path:
    """The directory compiled kernels are kept in."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "pytest-charz" / "kernels"


def find_compiler() -> Compiler:
    """The C compiler to use: ``$CC`` when set, else ``cc`` or ``gcc`` on ``PATH``.

    Raises :class:`~pytest_charz.errors.CharzError` when there is none (or ``$CC`` names a
    program that does not run), saying how to install one.
    """
    requested = os.environ.get("CC", "").strip()
    if requested:
        # $CC may carry arguments (``ccache gcc``); the first word must be a runnable program.
        words = requested.split()
        resolved = shutil.which(words[0])
        if resolved is None:
            raise CharzError(
                f"the C compiler $CC={requested!r} was not found; the CPU kernels of pytest-charz "
                f"are compiled at first use: {_INSTALL_HINT}, or point $CC at one"
            )
        command = " ".join([resolved, *words[1:]])
    else:
        found = shutil.which("cc") or shutil.which("gcc")
        if found is None:
            raise CharzError(
                f"no C compiler (cc or gcc) on PATH; the CPU kernels of pytest-charz are compiled "
                f"at first use: {_INSTALL_HINT}"
            )
        command = found
    return Compiler(command=command, version=_compiler_version(command))


@lru_cache(maxsize=8)
def _compiler_version(command: str) -> str:
    try:
        done = subprocess.run(
            [*command.split(), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as exc:
        raise CharzError(f"the C compiler {command!r} does not run ({exc}); {_INSTALL_HINT}") from exc
    if done.returncode != 0:
        raise CharzError(
            f"the C compiler {command!r} failed on --version (exit {done.returncode}): "
            f"{done.stderr.strip()[:500]}; {_INSTALL_HINT}"
        )
    lines = done.stdout.strip().splitlines()
    return lines[0] if lines else command


@lru_cache(maxsize=1)
def _host_cpu_flags() -> str:
    """The CPU feature flags ``-march=native`` resolves against (part of the cache key)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.machine() + " " + platform.processor()


def artifact_key(source_text: str, flags: Sequence[str], compiler: Compiler) -> str:
    """The cache key of one build: a hash of source, flags, compiler version and host CPU."""
    digest = hashlib.sha256()
    for part in (source_text, "\0".join(flags), compiler.version, _host_cpu_flags()):
        digest.update(part.encode("utf-8"))
        digest.update(b"\x00\x01")
    return digest.hexdigest()[:24]


def _compile(compiler: Compiler, source: Path, flags: Sequence[str], target: Path) -> tuple[bool, str]:
    """Compile ``source`` to ``target`` atomically; (succeeded, compiler's error text)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp", dir=target.parent)
    os.close(handle)
    try:
        done = subprocess.run(
            [*compiler.command.split(), *flags, "-o", temporary, str(source)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            return False, done.stderr.strip()
        os.chmod(temporary, 0o755)
        os.replace(temporary, target)
        return True, ""
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def build(source: Path, *, shared: bool = True, extra_flags: Sequence[str] = ()) -> BuiltArtifact:
    """Compile ``source`` (a shared library when ``shared``, else a program), or reuse the cache.

    Tries ``BASE_FLAGS + -fopenmp``, then ``BASE_FLAGS`` alone. Raises
    :class:`~pytest_charz.errors.CharzError` when there is no compiler or neither build works.
    """
    compiler = find_compiler()
    source_text = Path(source).read_text(encoding="utf-8")
    kind = LIBRARY_FLAGS if shared else ()
    suffix = ".so" if shared else ".exe"
    candidates = []
    for openmp in (True, False):
        flags = (*BASE_FLAGS, *(OPENMP_FLAGS if openmp else ()), *kind, *extra_flags)
        key = artifact_key(source_text, flags, compiler)
        candidates.append((openmp, flags, cache_dir() / f"{Path(source).stem}-{key}{suffix}"))
    # A cached build without OpenMP exists only because the OpenMP one failed to compile.
    for openmp, flags, target in candidates:
        if target.exists():
            return BuiltArtifact(target, compiler, flags, openmp, compiled_now=False)
    errors: list[str] = []
    for openmp, flags, target in candidates:
        succeeded, error_text = _compile(compiler, Path(source), flags, target)
        if succeeded:
            return BuiltArtifact(target, compiler, flags, openmp, compiled_now=True)
        errors.append(f"{' '.join(flags)}:\n{error_text[:2000]}")
    raise CharzError(
        f"could not compile {source} with {compiler.command} ({compiler.version}); "
        "the compiler said:\n" + "\n".join(errors)
    )


def load(source: Path) -> tuple[ctypes.CDLL, BuiltArtifact]:
    """Build (or reuse) ``source`` as a shared library and load it with ctypes.

    Calls into a :class:`ctypes.CDLL` release the GIL, so a kernel running in one Python thread
    does not stop another.
    """
    artifact = build(source, shared=True)
    try:
        library = ctypes.CDLL(str(artifact.path))
    except OSError as exc:
        raise CharzError(f"could not load the compiled kernels {artifact.path}: {exc}") from exc
    return library, artifact
