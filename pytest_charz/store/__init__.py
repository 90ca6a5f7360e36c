"""The baseline store: per target and suite, each case's reference measurement and its history.

``keys`` says where a baseline lives, ``reference`` what it holds, ``documents`` how the
versioned files are read and written (a directory store and an in-memory one; a write the file
system refuses is a :class:`StoreWriteError`), and ``policy``
the rules that decide, around each verdict, whether the store changes.
"""
from __future__ import annotations

from .documents import (
    BaselineStore,
    DirectoryStore,
    InMemoryStore,
    StoreWriteError,
    check_document,
    write_error_text,
)
from .keys import run_target_key, store_target_key, suite_module, target_directory, target_key
from .policy import evaluate_case
from .reference import (
    MAX_REFERENCE_SAMPLES,
    NEW_CASE_REASON,
    REFERENCE_SESSIONS,
    BaselineEntry,
    HistoryEntry,
    Reference,
    now_iso,
    thin_samples,
)

__all__ = ["BaselineEntry", "BaselineStore", "DirectoryStore", "HistoryEntry", "InMemoryStore",
           "MAX_REFERENCE_SAMPLES", "NEW_CASE_REASON", "REFERENCE_SESSIONS", "Reference", "StoreWriteError",
           "check_document", "evaluate_case", "now_iso", "run_target_key", "store_target_key", "suite_module",
           "target_directory", "target_key", "thin_samples", "write_error_text"]
