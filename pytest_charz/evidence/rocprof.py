"""rocprofv3 as the counter source of AMD GPUs: re-run a selected case under
``rocprofv3 --pmc ... --output-format csv`` and read its ``counter_collection.csv``.

The file (AMD, "Using rocprofv3", section "Kernel counter collection") has one row per kernel
dispatch and counter: ``Correlation_Id, Dispatch_Id, Agent_Id, Queue_Id, Process_Id, Thread_Id,
Grid_Size, Kernel_Id, Kernel_Name, Workgroup_Size, LDS_Block_Size, Scratch_Size, VGPR_Count,
Accum_VGPR_Count, SGPR_Count, Counter_Name, Counter_Value, Start_Timestamp, End_Timestamp``
(read by header name, so the column order does not matter). ``FETCH_SIZE`` and ``WRITE_SIZE`` are
rocprof's derived counters of memory traffic in KB; ``SQ_WAVES`` counts waves,
``GRBM_GUI_ACTIVE`` GPU busy cycles, ``SQ_INSTS_VALU`` vector ALU instructions.

``python -m pytest_charz.evidence.rocprof NODEID --out counters.json`` re-runs one case and
writes a ``charz-counters`` document, values per kernel dispatch (``"per": "kernel"``).
"""
from __future__ import annotations

import argparse
import csv
import glob
import io
import os
import statistics
import sys
import tempfile
from typing import Mapping, Sequence

from ..measure.readings import CounterReading

#: Counter -> (the run file's name, factor to its unit).
COUNTERS: dict[str, tuple[str, float]] = {
    "SQ_WAVES": ("waves", 1.0),
    "GRBM_GUI_ACTIVE": ("gpu-busy-cycles", 1.0),
    "SQ_INSTS_VALU": ("valu-inst", 1.0),
    "FETCH_SIZE": ("dram-read-bytes", 1024.0),
    "WRITE_SIZE": ("dram-write-bytes", 1024.0),
}
OUTPUT_NAME = "charz"


def rocprof_argv(command: Sequence[str], counters: Sequence[str] = tuple(COUNTERS), *, rocprof: str = "rocprofv3",
                 output_dir: str, output_name: str = OUTPUT_NAME) -> list[str]:
    """``rocprofv3`` collecting ``counters`` of ``command`` (an argv; its items stay single arguments)."""
    return [rocprof, "--pmc", *counters, "--output-format", "csv", "-d", output_dir, "-o", output_name,
            "--", *command]


def parse_counter_collection(text: str) -> list[dict[str, str]]:
    """The rows of a ``counter_collection.csv`` as dicts keyed by its header."""
    return [dict(row) for row in csv.DictReader(io.StringIO(text))]


def counters_from_rocprof(rows: Sequence[Mapping[str, str]],
                          counters: Mapping[str, tuple[str, float]] = COUNTERS) -> CounterReading:
    """Values per kernel dispatch: each counter summed over a dispatch's rows (one per dimension
    instance), then averaged over dispatches; a counter no row has is missing with the reason."""
    per_dispatch: dict[str, dict[str, float]] = {}
    names: set[str] = set()
    for row in rows:
        counter = (row.get("Counter_Name") or "").strip()
        dispatch = (row.get("Dispatch_Id") or row.get("Correlation_Id") or "").strip()
        try:
            value = float(row.get("Counter_Value") or "")
        except ValueError:
            continue
        entry = per_dispatch.setdefault(dispatch, {})
        entry[counter] = entry.get(counter, 0.0) + value
        names.add((row.get("Kernel_Name") or "").strip())
    if not per_dispatch:
        return CounterReading.absent("rocprofv3", {name: "rocprofv3 recorded no kernel dispatch"
                                                   for name, _ in counters.values()})
    values: dict[str, float] = {}
    missing: dict[str, str] = {}
    for counter, (name, scale) in counters.items():
        numbers = [d[counter] for d in per_dispatch.values() if counter in d]
        if numbers:
            values[name] = statistics.fmean(numbers) * scale
        else:
            missing[name] = f"rocprofv3 gave no value for {counter} (not available on this GPU)"
    notes = (f"kernel dispatches: {len(per_dispatch)} ({len(names)} distinct kernels)",)
    return CounterReading(values, missing, "rocprofv3", len(per_dispatch), "kernel", notes)


def find_counter_file(output_dir: str, output_name: str = OUTPUT_NAME) -> str | None:
    """The ``<name>_counter_collection.csv`` rocprofv3 wrote under ``output_dir`` (any depth)."""
    found = sorted(glob.glob(os.path.join(output_dir, "**", f"{output_name}_counter_collection.csv"),
                             recursive=True))
    return found[0] if found else None


PROG = "python -m pytest_charz.evidence.rocprof"


def command_main(argv: Sequence[str] | None = None) -> int:
    """What ``python -m`` runs: :func:`main`, with a usage error (the tool not installed,
    ``--out`` a directory) as one ``error:`` line and exit status 2, and Ctrl-C as 130
    (:func:`pytest_charz.errors.run_command`), never a traceback."""
    from ..errors import run_command

    return run_command(PROG, lambda: main(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pytest_charz.evidence.rocprof NODEID --out FILE``: one case under rocprofv3.

    Returns 0 when the tool ran and gave counters, 1 when it did not; UsageError when the tool
    is not installed or ``--out`` cannot be written (:func:`command_main` prints it).
    """
    from ..formats import atomic_write_json, check_output_file
    from .rerun import pytest_case_argv
    from .subprocess_run import find_tool, run_tool

    parser = argparse.ArgumentParser(prog=PROG,
                                     description="re-run one case under rocprofv3 and record its counters")
    parser.add_argument("nodeid")
    parser.add_argument("--out", required=True)
    parser.add_argument("--target", default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    check_output_file(args.out, "--out")
    rocprof = find_tool("rocprofv3", "install ROCm's rocprofiler-sdk (/opt/rocm/bin)")
    with tempfile.TemporaryDirectory() as scratch:
        command = pytest_case_argv(args.nodeid, os.path.join(scratch, "run.json"), target=args.target)
        result = run_tool(rocprof_argv(command, rocprof=rocprof, output_dir=scratch), timeout_s=args.timeout)
        path = find_counter_file(scratch)
        rows = parse_counter_collection(open(path, encoding="utf-8").read()) if path else []
    reading = counters_from_rocprof(rows)
    atomic_write_json(args.out, {**reading.to_json(), "case": args.nodeid, "tool_exit": result.returncode,
                                 "timed_out": result.timed_out})
    print(f"{args.nodeid}: {len(reading.values)} counters per dispatch -> {args.out}", file=sys.stderr)
    return 0 if result.ok and reading.values else 1


if __name__ == "__main__":
    sys.exit(command_main())
