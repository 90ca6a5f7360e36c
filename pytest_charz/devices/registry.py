"""The backend registry: target prefixes to backends, and binding ``--target`` to a device.

``--target=NAME:REST`` goes to the backend registered as ``NAME``, which resolves ``REST``
(``--target=sim:h100-sxm``: the ``sim`` backend, target ``h100-sxm``). A name without ``:``
(``--target=h100``, ``--target=cpu``, or none) is resolved by the catalogue against the devices
that detection finds (:func:`.detect.select_target`), then bound by the backend that drives the
device found. The built-in backends ``cpu``, ``cuda`` and ``rocm`` are :class:`CatalogueBackend`
values; the plugin registers them through its own ``pytest_charz_backends`` implementation, the
same hook a conftest or another plugin uses for its own.
"""
from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Callable, Iterator

from ..errors import UsageError
from .base import Backend, Device, VisibleDevice

if TYPE_CHECKING:
    from ..targets.spec import TargetSpec

#: What a Device must have (the Device protocol's members), checked on what a backend opens.
DEVICE_MEMBERS = ("info", "backend", "timer_resolution_s", "time_batch", "synchronize",
                  "flush_caches", "telemetry", "check_sample", "close")
#: Backends of the project that live in a module of their own: prefix -> (module, what is missing).
OPTIONAL_BACKENDS = {
    "sim": ("pytest_charz.sim", "the simulator (pytest_charz.sim) is not installed"),
}


def _open_cpu(index: int) -> Device:
    from .cpu import CpuDevice

    return CpuDevice(index)


def _open_cuda(index: int) -> Device:
    from .cuda import CudaDevice

    return CudaDevice(index)


def _open_rocm(index: int) -> Device:
    from .rocm import RocmDevice

    return RocmDevice(index)


class CatalogueBackend:
    """A built-in backend: targets from the catalogue (the host CPU derived at run time),
    devices from detection. ``--target=cuda:h100`` is ``--target=h100`` with the check that the
    target really is a ``cuda`` one; ``--target=cuda:`` is the first catalogued CUDA device."""

    def __init__(self, name: str, open_index: Callable[[int], Device]) -> None:
        self.name = name
        self._open_index = open_index

    def __repr__(self) -> str:
        return f"CatalogueBackend({self.name!r})"

    def select(self, name: str, worker: int | None) -> tuple["TargetSpec", VisibleDevice]:
        from ..targets.catalogue import resolve
        from .detect import describe, select_target, visible_devices

        if name:
            spec = resolve(name)
            if spec.identity.backend != self.name:
                raise UsageError(
                    f"target {name!r} ({spec.id}) is driven by the {spec.identity.backend!r} backend, not "
                    f"{self.name!r}; use --target={spec.identity.backend}:{name} or --target={name}")
        visible = visible_devices()
        # Only this backend's devices may be chosen; the host CPU stays first, as detection has it.
        candidates = [d for d in visible if d.backend in ("cpu", self.name)]
        spec, device = select_target(name or None, candidates, worker)
        if device.backend != self.name:
            raise UsageError(f"no {self.name} device that the catalogue describes is visible; "
                             f"visible: {describe(visible)}")
        return spec, device

    def open(self, visible: VisibleDevice, spec: "TargetSpec") -> Device:
        return self._open_index(visible.index)


def builtin_backends() -> tuple[CatalogueBackend, ...]:
    """The backends the plugin always registers: ``cpu``, ``cuda``, ``rocm``."""
    return (CatalogueBackend("cpu", _open_cpu), CatalogueBackend("cuda", _open_cuda),
            CatalogueBackend("rocm", _open_rocm))


def check_backend(backend: object) -> Backend:
    """``backend`` if it follows the Backend protocol, else a UsageError saying what it lacks."""
    name = getattr(backend, "name", None)
    if not isinstance(name, str) or not name or ":" in name:
        raise UsageError(f"a backend's name is its target prefix, a non-empty string without ':'; "
                         f"got {name!r} on {backend!r}")
    missing = [member for member in ("select", "open") if not callable(getattr(backend, member, None))]
    if missing:
        raise UsageError(f"backend {name!r} ({backend!r}) lacks {', '.join(missing)}; a backend has "
                         "name, select(name, worker) and open(visible, spec)")
    return backend  # type: ignore[return-value]


class BackendRegistry:
    """The backends of one session, by name. A name is registered once: a second backend under
    the same name is a UsageError, never a silent replacement."""

    def __init__(self, backends: tuple[Backend, ...] = ()) -> None:
        self._backends: dict[str, Backend] = {}
        for backend in backends:
            self.register(backend)

    def register(self, backend: Backend) -> None:
        """Add ``backend`` under ``backend.name`` (checked with :func:`check_backend`)."""
        backend = check_backend(backend)
        known = self._backends.get(backend.name)
        if known is not None and known is not backend:
            raise UsageError(f"a backend named {backend.name!r} is already registered ({known!r}); "
                             f"cannot register {backend!r} under the same name")
        self._backends[backend.name] = backend

    def get(self, name: str) -> Backend | None:
        return self._backends.get(name)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._backends)

    def __contains__(self, name: object) -> bool:
        return name in self._backends

    def __iter__(self) -> Iterator[Backend]:
        return iter(self._backends.values())

    def __len__(self) -> int:
        return len(self._backends)


def split_target(target_name: str) -> tuple[str | None, str]:
    """``("sim", "h100-sxm")`` for ``"sim:h100-sxm"``; ``(None, "h100")`` without a prefix."""
    prefix, sep, rest = target_name.partition(":")
    return (prefix.strip().lower(), rest.strip()) if sep else (None, target_name)


def unknown_backend(target_name: str, prefix: str, backends: BackendRegistry) -> UsageError:
    """The error for a prefix that no backend answers: the known names, and why a backend the
    project knows of is missing."""
    message = (f"--target {target_name!r}: no backend {prefix!r} is registered; "
               f"known backends: {', '.join(backends.names()) or 'none'}")
    if prefix in OPTIONAL_BACKENDS:
        module, missing = OPTIONAL_BACKENDS[prefix]
        if importlib.util.find_spec(module) is None:
            message += f"; {missing}"
    return UsageError(message + ". A conftest or plugin adds a backend through the "
                                "pytest_charz_backends hook.")


def _check_selection(backend: Backend, selected: object) -> tuple["TargetSpec", VisibleDevice]:
    from ..targets.spec import TargetSpec

    if (not isinstance(selected, tuple) or len(selected) != 2 or not isinstance(selected[0], TargetSpec)
            or not isinstance(selected[1], VisibleDevice)):
        raise UsageError(f"backend {backend.name!r}: select() must return (TargetSpec, VisibleDevice), "
                         f"got {selected!r}")
    return selected[0], selected[1]


def _check_device(backend: Backend, device: object) -> Device:
    missing = [member for member in DEVICE_MEMBERS if not hasattr(device, member)]
    if missing:
        raise UsageError(f"backend {backend.name!r}: open() returned {device!r}, which lacks "
                         f"{', '.join(missing)} of the Device protocol")
    return device  # type: ignore[return-value]


def bind(target_name: str | None, worker: int | None,
         backends: BackendRegistry) -> tuple["TargetSpec", VisibleDevice, Device]:
    """Resolve ``--target`` (None: what is here) and open its device: ``(spec, visible, device)``.

    ``NAME:REST`` is routed to the backend registered as ``NAME`` (an unknown one is a
    UsageError listing the known names); other names go through :func:`.detect.select_target`
    and the backend of the device found. ``worker`` is the pytest-xdist worker number.
    """
    from .detect import select_target

    prefix, rest = split_target(target_name) if target_name else (None, "")
    if prefix is not None:
        backend = backends.get(prefix)
        if backend is None:
            raise unknown_backend(str(target_name), prefix, backends)
        spec, visible = _check_selection(backend, backend.select(rest, worker))
    else:
        spec, visible = select_target(target_name, worker=worker)
        found = backends.get(visible.backend)
        if found is None:
            raise UsageError(f"no backend drives {visible.backend!r} devices; known backends: "
                             f"{', '.join(backends.names()) or 'none'}")
        backend = found
    return spec, visible, _check_device(backend, backend.open(visible, spec))
