"""``charz export RUN --format pytest-benchmark|csv|parquet [-o PATH]``: write a run in another
tool's format and say what was written.

What goes in each file is :mod:`pytest_charz.report.export`'s; this module decides where the
file goes, writes it atomically and prints.
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from .export import FORMATS


def export_path(run_path: str, fmt: str, out: str | None) -> str:
    """Where ``charz export`` writes: ``out``, else next to the run with the format's suffix
    (``run.json`` -> ``run.benchmark.json``, ``run.cases.csv``, ``run.cases.parquet``).
    UsageError for an ``out`` that is a directory (or under a file)."""
    from ..formats import check_output_file

    if out:
        return check_output_file(out, "-o/--out")
    stem = run_path
    for suffix in (".partial.jsonl", ".json.gz", ".json"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return stem + FORMATS[fmt]


def _write_parquet(path: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """The rows as a Parquet file (extra ``export``: pandas and pyarrow), written to a temporary
    file beside ``path`` and renamed, so a reader never sees half a file and a failed write leaves
    nothing behind; UsageError when ``path`` cannot be written."""
    from ..errors import UsageError, require_extra
    from ..formats import check_output_file

    pandas = require_extra("pandas", "export")
    require_extra("pyarrow", "export")
    frame = pandas.DataFrame(rows, columns=columns)
    check_output_file(path, "-o/--out")
    directory = os.path.dirname(os.path.abspath(path)) or "."
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet", dir=directory)
        os.close(fd)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    try:
        frame.to_parquet(tmp, engine="pyarrow", index=False)
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None
        raise


def export_command(args: Any) -> int:
    """``charz export``: ``args`` has ``run`` (a run file or journal), ``format`` (a key of
    :data:`~pytest_charz.report.export.FORMATS`) and ``out`` (a path or None). Returns 0.

    A missing extra for Parquet is a MissingExtraError naming ``export``. Cases whose samples were
    all discarded have no pytest-benchmark stats: they are left out of that file, and named."""
    from ..errors import UsageError
    from ..formats import atomic_write_text
    from ..run import load_run
    from .export import (
        case_rows,
        exportable_cases,
        pytest_benchmark_document,
        pytest_benchmark_text,
        row_columns,
        rows_csv,
    )

    fmt = args.format
    if fmt not in FORMATS:
        raise UsageError(f"export format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    path = export_path(args.run, fmt, getattr(args, "out", None))
    run = load_run(args.run)
    if fmt == "pytest-benchmark":
        # Not a charz document (no kind/version of ours): written as plain text, atomically.
        document = pytest_benchmark_document(run)
        atomic_write_text(path, pytest_benchmark_text(document))
        count = len(document["benchmarks"])
        for case_id in exportable_cases(run)[1]:
            print(f"charz: {case_id}: every sample was discarded; left out of the pytest-benchmark file",
                  file=sys.stderr)
    else:
        rows, columns = case_rows(run), row_columns(run)
        if fmt == "csv":
            atomic_write_text(path, rows_csv(rows, columns))
        else:
            _write_parquet(path, rows, columns)
        count = len(rows)
    print(f"wrote {path} ({fmt}, {count} case(s) of {run.target.id})")
    return 0
