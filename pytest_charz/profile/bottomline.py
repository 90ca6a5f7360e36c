"""The profile's bottom line: the few figures a compiler or runtime engineer acts on (peak
compute per dtype, the GEMM ceiling and what bounds it, bandwidth and capacity of each memory
level, DRAM latency, contention), each with its evidence and its most important caveat.

A ceiling flagged by :mod:`.sanity` is always in the bottom line (a dropped figure too, its value
shown as unknown), with ``flagged`` naming its rules and its most telling flag as the caveat.
"""
from __future__ import annotations

from typing import Any

_PICK = ("flops:", "gemm:", "bandwidth:", "capacity:", "latency:dram", "slowdown:")
# Caveats that say why a figure may mislead, before the routine ones (steal, single run).
_FIRST = ("unstable", "narrower", "not physical", "disagree", "sees only part", "only the", "not flat",
          "differs from the spec")


def _caveat(caveats: list[str]) -> str:
    for key in _FIRST:
        for text in caveats:
            if key in text:
                return text
    routine = [c for c in caveats if c != "single run"]
    return routine[0] if routine else "-"


def _row(ceiling: dict[str, Any]) -> dict[str, Any]:
    evidence = ceiling.get("evidence") or {}
    blas = ceiling.get("blas") or {}
    where = f"{len(evidence.get('cases') or [])} case(s), {evidence.get('samples', 0)} samples"
    if blas.get("core"):
        where += f"; BLAS {blas.get('library')} core {blas['core']}"
    flags = ceiling.get("flags") or []
    row = {"name": ceiling["name"], "value": ceiling["value"], "unit": ceiling.get("unit"),
           "fraction_of_spec": ceiling.get("fraction_of_spec"), "range": ceiling.get("range"),
           "unstable": bool(ceiling.get("unstable")), "evidence": where,
           "caveat": flags[0]["text"] if flags else _caveat(list(ceiling.get("caveats") or []))}
    if flags:    # only flagged rows carry the key: unflagged profiles stay as they were
        row["flagged"] = list(dict.fromkeys(flag["rule"] for flag in flags))
    return row


def bottom_line(ceilings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per acted-on ceiling: name, value, unit, fraction of spec, evidence, caveat; then
    every flagged ceiling the picks left out (``flagged``: its rules)."""
    rows = []
    picked: set[str] = set()
    for prefix in _PICK:
        for ceiling in ceilings:
            if not ceiling["name"].startswith(prefix) or (ceiling.get("value") is None and not ceiling.get("flags")):
                continue
            rows.append(_row(ceiling))
            picked.add(ceiling["name"])
    rows.extend(_row(c) for c in ceilings if c.get("flags") and c["name"] not in picked)
    return rows
