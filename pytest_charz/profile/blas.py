"""The BLAS behind each GEMM ceiling: library, kernel core type, threads, SIMD width, and a
caveat when the library's kernels are narrower than the hardware's widest vectors.

The case's ``work.shape`` says what ran it (``blas``, ``blas_core``, ``blas_threads``,
``blas_vector_bits``, see ``docs/run-format.md``); runs recorded before cases carried it fall back
to the run's provenance (``blas``, threadpoolctl's report) and its environment
(``OPENBLAS_CORETYPE`` forces OpenBLAS's kernels whatever the CPU).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from ..measure.provenance import core_vector_bits
from ..records import Run
from .figures import CaseFigures, SpecView, shape

_BITS = re.compile(r"(\d+)-bit")


def hardware_vector_bits(spec: SpecView) -> int | None:
    """The widest SIMD vector of the spec's compute, in bits (``x86_64 512-bit (avx512f)``)."""
    if spec.spec is None:
        return None
    found = _BITS.search(spec.spec.identity.architecture or "")
    return int(found.group(1)) if found else None


def gemm_backend(case_shape: Mapping[str, Any], run: Run) -> dict[str, Any]:
    """What ran a GEMM case: from its shape, else the run's provenance and environment."""
    if case_shape.get("blas_core") or case_shape.get("blas"):
        return {"library": case_shape.get("blas"), "core": case_shape.get("blas_core"),
                "threads": case_shape.get("blas_threads"), "vector_bits": case_shape.get("blas_vector_bits"),
                "source": "case"}
    if case_shape.get("library") == "torch":
        return {"library": "torch", "core": None, "threads": None, "vector_bits": None, "source": "unknown"}
    pools = run.provenance.get("blas") or []
    env = run.provenance.get("environment") or {}
    forced = env.get("OPENBLAS_CORETYPE")
    if pools:
        pool = pools[0]
        return {"library": f"{pool.get('internal_api')} {pool.get('version')}", "core": pool.get("architecture"),
                "threads": pool.get("num_threads"), "vector_bits": pool.get("vector_bits"), "source": "run provenance"}
    if forced:
        return {"library": "OpenBLAS (assumed: OPENBLAS_CORETYPE is set)", "core": forced, "threads": None,
                "vector_bits": core_vector_bits(forced), "source": "environment OPENBLAS_CORETYPE"}
    return {"library": None, "core": None, "threads": None, "vector_bits": None, "source": "unknown"}


def annotate_gemm(figures: list[CaseFigures], run: Run, spec: SpecView) -> None:
    """Add the BLAS of its best case to each ``gemm:*`` figure (``extra["blas"]``) and a caveat
    when its kernels are narrower than the hardware's widest vectors."""
    widest = hardware_vector_bits(spec)
    env = run.provenance.get("environment") or {}
    for figure in figures:
        if not figure.name.startswith("gemm:"):
            continue
        best = next((c for c in figure.cases if c.id == figure.best_case), figure.cases[0] if figure.cases else None)
        if best is None:
            continue
        backend = gemm_backend(shape(best), run)
        figure.extra["blas"] = backend
        described = ", ".join(f"{k} {backend[k]}" for k in ("library", "core", "threads") if backend.get(k))
        origin = f"from the {backend['source']}" if backend["source"] != "unknown" else "not recorded in this run"
        figure.notes.append(f"BLAS: {described or 'unknown'} ({origin})")
        bits = backend.get("vector_bits")
        if bits and widest and bits < widest:
            reason = (f"; OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']} in the run's environment forces them"
                      if env.get("OPENBLAS_CORETYPE") else "")
            fraction = f" at {100 * figure.value / figure.spec:.0f}% of the peak" if figure.value and figure.spec else ""
            figure.notes.append(f"the BLAS kernels ({backend.get('core')}, {bits}-bit) are narrower than the "
                                f"hardware's {widest}-bit vectors{reason}: this ceiling{fraction} is the library's, "
                                f"not the core's (at most {bits / widest:.0%} of the peak)")
