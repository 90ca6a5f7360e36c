"""What is visible on this machine, and binding a target to the device that is really there.

``--target`` is checked against the devices actually visible: asking for ``mi300x`` on a machine
with an H100, or with no accelerator at all, is a usage error, never a mislabelled result.
Opening the device found is the backend's part (:mod:`.registry`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError
from .base import VisibleDevice

if TYPE_CHECKING:
    from ..targets.spec import TargetSpec


def visible_gpus() -> list[VisibleDevice]:
    try:
        from .detect_gpu import visible_gpus as detect
    except ImportError:
        return []
    return detect()


def visible_devices() -> list[VisibleDevice]:
    """The host CPU first, then every accelerator that a backend can see."""
    from ..measure.provenance import cpu_model

    return [VisibleDevice(backend="cpu", index=0, name=cpu_model()), *visible_gpus()]


def describe(visible: list[VisibleDevice]) -> str:
    return "; ".join(f"{d.backend}:{d.index} ({d.name})" for d in visible)


def _pick(devices: list[VisibleDevice], worker: int | None) -> VisibleDevice:
    """One of several matching devices: pytest-xdist worker ``gwN`` takes the N-th (modulo), so
    with one worker per device every device is characterized by its own worker."""
    return devices[(worker or 0) % len(devices)]


def default_target(visible: list[VisibleDevice], worker: int | None = None) -> tuple["TargetSpec", VisibleDevice]:
    """The first accelerator kind that the catalogue recognises (its devices shared among
    pytest-xdist workers), else the host CPU."""
    from ..targets.catalogue import match_visible, resolve

    for device in visible:
        if device.backend == "cpu":
            continue
        spec = match_visible(device)
        if spec is not None:
            return select_target(spec.id, visible, worker)
    return resolve("cpu"), visible[0]


def select_target(name: str | None, visible: list[VisibleDevice] | None = None,
                  worker: int | None = None) -> tuple["TargetSpec", VisibleDevice]:
    """Resolve ``name`` (None: the default) and find the visible device it describes; with
    several such devices, ``worker`` (the pytest-xdist worker number) picks one."""
    from ..targets.catalogue import match_visible, resolve

    visible = visible if visible is not None else visible_devices()
    if not name:
        return default_target(visible, worker)
    spec = resolve(name)
    if spec.identity.backend == "cpu":
        return spec, visible[0]
    matching = []
    for device in visible:
        if device.backend == "cpu":
            continue
        matched = match_visible(device)
        if matched is not None and matched.id == spec.id:
            matching.append(device)
    if matching:
        return spec, _pick(matching, worker)
    asked = f"{name!r}" if name.lower() == spec.id else f"{name!r} (resolves to {spec.id})"
    raise UsageError(
        f"target {asked}, {spec.identity.name}, is not visible on this machine; "
        f"visible: {describe(visible)}. Run without --target to characterize what is here."
    )
