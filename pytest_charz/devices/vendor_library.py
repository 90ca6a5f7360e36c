"""What the NVML and amdsmi telemetry classes share: a vendor library opened for one device,
whose calls may each fail on their own.

A driver that refuses one query (not supported on this board, missing from an old binding)
leaves that field unread and the reason in :attr:`VendorLibrary.unreadable`; the other fields
are still read. :meth:`VendorLibrary.close` shuts the library down once, whatever happened.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any, Callable


class VendorLibrary:
    """Base of a telemetry class bound to one device through a vendor Python binding."""

    #: Set by :meth:`_open_library`.
    _library: ModuleType
    _error: type[BaseException]
    _library_name: str
    _shutdown_name: str
    _open: bool = False

    def _open_library(self, library: ModuleType, library_name: str, error_name: str, init_name: str,
                      shutdown_name: str) -> None:
        """Initialise ``library`` (``<init_name>()``); ``error_name`` is its exception class."""
        self._library = library
        self._library_name = library_name
        self._error = getattr(library, error_name, Exception)
        self._shutdown_name = shutdown_name
        #: Why each field that could not be read was not read (call name -> message).
        self.unreadable: dict[str, str] = {}
        getattr(library, init_name)()
        self._open = True

    def _call(self, name: str, *args: Any) -> Any:
        """``<library>.<name>(*args)``, or None (reason kept in ``unreadable``) when it fails."""
        fn: Callable[..., Any] | None = getattr(self._library, name, None)
        if fn is None:
            self.unreadable[name] = f"not in this {self._library_name}"
            return None
        try:
            value = fn(*args)
        except self._error as exc:
            self.unreadable[name] = str(exc) or type(exc).__name__
            return None
        self.unreadable.pop(name, None)
        return value

    def close(self) -> None:
        """Shut the library down (once; a failing shutdown is ignored: there is nothing to undo)."""
        if self._open:
            self._open = False
            try:
                getattr(self._library, self._shutdown_name)()
            except self._error:
                pass
