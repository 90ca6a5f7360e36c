"""An exclusive, cross-process lock per device: measurements never overlap on one device, also
when pytest-xdist runs several workers on a machine with a single device."""
from __future__ import annotations

import os
import tempfile
from typing import Any


class DeviceLock:
    def __init__(self, backend: str, index: int, directory: str | None = None) -> None:
        directory = directory or os.environ.get("CHARZ_LOCK_DIR") or tempfile.gettempdir()
        self.path = os.path.join(directory, f"pytest-charz-{backend}-{index}.lock")
        self._handle: Any = None
        self._depth = 0

    def __enter__(self) -> "DeviceLock":
        if self._depth == 0:
            import fcntl

            self._handle = open(self.path, "a")
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_EX)
        self._depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if self._depth == 0 and self._handle is not None:
            import fcntl

            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
