"""Nsight Compute (``ncu``) as the counter source of NVIDIA GPUs: re-run a selected case under
``ncu --csv --page raw`` and read DRAM bytes, SM and tensor-pipe throughput, achieved occupancy
and FP instruction counts per kernel launch.

``ncu --csv --page raw --print-units base --metrics M1,M2,...`` prints one CSV table (NVIDIA,
"Nsight Compute CLI", sections "Command Line Options" -> "Console Output": ``--csv``, ``--page``,
``--print-units``; "Metrics Guide" for the metric names): a header row (``"ID"``, ``"Process
ID"``, ``"Process Name"``, ``"Host Name"``, ``"Kernel Name"``, ..., then one column per metric),
a units row, then one row per profiled kernel launch. Numbers may carry thousands separators.
ncu's own lines start with ``==PROF==`` and are skipped.

Re-running a case: ``python -m pytest_charz.evidence.ncu NODEID --out counters.json`` profiles
``--launch-count`` kernel launches after ``--launch-skip`` (past warm-up) and writes a
``charz-counters`` document whose values are per kernel launch (``"per": "kernel"``).
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import sys
import tempfile
from typing import Mapping, Sequence

from ..measure.readings import CounterReading

#: Metric -> the run file's name. Sums are per launch; percentages are averaged over launches.
METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "kernel-time-s",
    "dram__bytes_read.sum": "dram-read-bytes",
    "dram__bytes_write.sum": "dram-write-bytes",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm-throughput-pct",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor-pipe-active-pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved-occupancy-pct",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": "fp32-fma-thread-inst",
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum": "fp32-add-thread-inst",
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum": "fp32-mul-thread-inst",
    "sm__sass_thread_inst_executed_op_dfma_pred_on.sum": "fp64-fma-thread-inst",
    "sm__sass_thread_inst_executed_op_dadd_pred_on.sum": "fp64-add-thread-inst",
    "sm__sass_thread_inst_executed_op_dmul_pred_on.sum": "fp64-mul-thread-inst",
}
#: Units ncu prints with ``--print-units base`` -> factor to the run file's unit.
_UNIT_SCALE = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3,
               "s": 1.0, "second": 1.0, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}
_IDENTITY_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                     "Block Size", "Grid Size", "Device", "CC")


def ncu_argv(command: Sequence[str], metrics: Sequence[str] = tuple(METRICS), *, ncu: str = "ncu",
             launch_skip: int = 0, launch_count: int | None = None, log_file: str | None = None,
             kernel_regex: str | None = None) -> list[str]:
    """``ncu`` collecting ``metrics`` of ``command`` (an argv; its items stay single arguments)."""
    argv = [ncu, "--csv", "--page", "raw", "--print-units", "base", "--target-processes", "all",
            "--metrics", ",".join(metrics)]
    if launch_skip:
        argv += ["--launch-skip", str(int(launch_skip))]
    if launch_count is not None:
        argv += ["--launch-count", str(int(launch_count))]
    if kernel_regex:
        argv += ["--kernel-name", f"regex:{kernel_regex}"]
    if log_file:
        argv += ["--log-file", log_file]
    return argv + ["--", *command]


def _number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "")
    if not cleaned or cleaned.lower() in ("n/a", "nan"):
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict[str, object]]:
    """The kernel rows of ``ncu --csv --page raw`` output: identity columns as text, metric
    columns as floats in base units (None when ncu printed n/a)."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("==")]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    body = rows[1:]
    units: list[str] = [""] * len(header)
    if body and not body[0][0].strip():      # the units row has no ID
        units, body = body[0], body[1:]
    kernels: list[dict[str, object]] = []
    for row in body:
        entry: dict[str, object] = {}
        for i, column in enumerate(header):
            cell = row[i] if i < len(row) else ""
            if column in _IDENTITY_COLUMNS:
                entry[column] = cell
            else:
                value = _number(cell)
                unit = units[i] if i < len(units) else ""
                entry[column] = None if value is None else value * _UNIT_SCALE.get(unit, 1.0)
        kernels.append(entry)
    return kernels


def counters_from_ncu(kernels: Sequence[Mapping[str, object]],
                      metrics: Mapping[str, str] = METRICS) -> CounterReading:
    """Values per kernel launch (sums averaged, percentages averaged); a metric no row has is
    missing with the reason."""
    values: dict[str, float] = {}
    missing: dict[str, str] = {}
    if not kernels:
        return CounterReading.absent("ncu", {name: "ncu profiled no kernel launch" for name in metrics.values()})
    for metric, name in metrics.items():
        numbers = [float(v) for k in kernels if isinstance(v := k.get(metric), (int, float))]
        if not numbers:
            missing[name] = f"ncu gave no value for {metric} (not collected on this GPU, or n/a)"
            continue
        values[name] = statistics.fmean(numbers)
    names = sorted({str(k.get("Kernel Name", "")) for k in kernels})
    notes = (f"kernels profiled: {len(kernels)} ({len(names)} distinct)",)
    return CounterReading(values, missing, "ncu", len(kernels), "kernel", notes)


PROG = "python -m pytest_charz.evidence.ncu"


def command_main(argv: Sequence[str] | None = None) -> int:
    """What ``python -m`` runs: :func:`main`, with a usage error (the tool not installed,
    ``--out`` a directory) as one ``error:`` line and exit status 2, and Ctrl-C as 130
    (:func:`pytest_charz.errors.run_command`), never a traceback."""
    from ..errors import run_command

    return run_command(PROG, lambda: main(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pytest_charz.evidence.ncu NODEID --out FILE``: one case under ncu.

    Returns 0 when the tool ran and gave counters, 1 when it did not; UsageError when the tool
    is not installed or ``--out`` cannot be written (:func:`command_main` prints it).
    """
    from ..formats import atomic_write_json, check_output_file
    from .rerun import pytest_case_argv
    from .subprocess_run import find_tool, run_tool

    parser = argparse.ArgumentParser(prog=PROG,
                                     description="re-run one case under Nsight Compute and record its counters")
    parser.add_argument("nodeid")
    parser.add_argument("--out", required=True, help="where the charz-counters JSON goes")
    parser.add_argument("--target", default=None)
    parser.add_argument("--launch-skip", type=int, default=20)
    parser.add_argument("--launch-count", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    check_output_file(args.out, "--out")
    ncu = find_tool("ncu", "install Nsight Compute (it ships with the CUDA toolkit)")
    with tempfile.TemporaryDirectory() as scratch:
        log = os.path.join(scratch, "ncu.csv")
        command = pytest_case_argv(args.nodeid, os.path.join(scratch, "run.json"), target=args.target)
        result = run_tool(ncu_argv(command, ncu=ncu, launch_skip=args.launch_skip, launch_count=args.launch_count,
                                   log_file=log), timeout_s=args.timeout)
        text = open(log, encoding="utf-8").read() if os.path.exists(log) else result.stdout
    reading = counters_from_ncu(parse_ncu_csv(text))
    document = {**reading.to_json(), "case": args.nodeid, "tool_exit": result.returncode,
                "timed_out": result.timed_out}
    atomic_write_json(args.out, document)
    print(f"{args.nodeid}: {len(reading.values)} counters per kernel launch, {len(reading.missing)} missing "
          f"-> {args.out}", file=sys.stderr)
    return 0 if result.ok and reading.values else 1


if __name__ == "__main__":
    sys.exit(command_main())
