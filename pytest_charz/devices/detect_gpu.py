"""Which GPUs this process can use, named as a backend will later bind them.

NVIDIA: NVML (``pynvml``) gives the names and PCI ids of every GPU in the machine; the CUDA
runtime (CuPy, else PyTorch) says which of them this process sees and in which order, which is
what ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` decide. Without a CUDA runtime the
``CUDA_VISIBLE_DEVICES`` list is applied to NVML's (PCI-ordered) list, which matches the runtime
when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or when all GPUs are of one kind. Without NVML, PyTorch's
CUDA build alone gives names and indices.

AMD: ``amdsmi`` gives names and PCI ids of every GPU; PyTorch's ROCm (HIP) build gives the
visible order, else ``ROCR_VISIBLE_DEVICES`` then ``HIP_VISIBLE_DEVICES`` (or
``CUDA_VISIBLE_DEVICES``, which HIP also honours) are applied to amdsmi's list.

The ``index`` of each :class:`VisibleDevice` is the device index of the runtime (what
``torch.cuda.device(i)`` or ``cupy.cuda.Device(i)`` takes), never NVML's or amdsmi's own.
Nothing here imports a GPU library at module import time, and no failure of a library (absent,
no driver, no device) escapes :func:`visible_gpus`: it then returns fewer devices, or none.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from .base import VisibleDevice

_T = TypeVar("_T")
_SYSFS_PCI = "/sys/bus/pci/devices"


@dataclass(frozen=True)
class PhysicalGpu:
    """A GPU as the management library (NVML, amdsmi) lists it."""

    name: str
    pci_bus_id: str | None           # normalized, "0000:3b:00.0"
    pci_device_id: str | None        # "0x2335"
    uuid: str | None = None


def normalize_pci_bus_id(bus_id: str) -> str:
    """``domain:bus:device.function`` with a 4-digit domain, lower case: NVML writes an 8-digit
    domain (``00000000:3B:00.0``), the CUDA runtime and sysfs a 4-digit one (``0000:3b:00.0``)."""
    text = bus_id.strip().lower().rstrip("\x00")
    match = re.fullmatch(r"(?:([0-9a-f]+):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])", text)
    if match is None:
        raise ValueError(f"not a PCI bus id (domain:bus:device.function): {bus_id!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


def format_pci_id(value: Any) -> str | None:
    """A 16-bit PCI id as ``0x74a1`` from an int or a hex string; None when not readable."""
    if value is None or value == "N/A":
        return None
    try:
        number = int(value, 16) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        return None
    return f"0x{number & 0xFFFF:04x}"


def sysfs_pci_device_id(pci_bus_id: str, root: str = _SYSFS_PCI) -> str | None:
    """The product id of the PCI function at ``pci_bus_id`` from sysfs (Linux), else None."""
    try:
        with open(os.path.join(root, normalize_pci_bus_id(pci_bus_id), "device")) as handle:
            return format_pci_id(handle.read().strip())
    except (OSError, ValueError):
        return None


def apply_visible_devices(devices: Sequence[_T], spec: str | None,
                          uuid_of: Callable[[_T], str | None] = lambda d: None) -> list[_T]:
    """The devices a ``*_VISIBLE_DEVICES`` value selects, in the order it names them.

    As the CUDA runtime reads it: unset means all; an entry is an index into ``devices`` or a
    UUID (or a unique prefix of one); the list stops at the first entry that is out of range,
    unknown or repeated, so ``"0,7,1"`` on a 4-GPU machine selects device 0 only; an empty
    value selects none. MIG instances are not enumerated here: a ``MIG-`` entry stops the list.
    """
    if spec is None:
        return list(devices)
    chosen: list[int] = []
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            break
        position: int | None = None
        if re.fullmatch(r"\d+", entry):
            position = int(entry) if int(entry) < len(devices) else None
        elif not entry.upper().startswith("MIG-"):
            position = _uuid_position([uuid_of(d) for d in devices], entry)
        if position is None or position in chosen:
            break
        chosen.append(position)
    return [devices[i] for i in chosen]


def _uuid_position(uuids: Sequence[str | None], entry: str) -> int | None:
    """Position of the one UUID that ``entry`` is a prefix of (``GPU-`` optional), else None."""
    key = entry.lower()
    if key.startswith("gpu-"):
        key = key[4:]
    bare = [(u or "").lower().removeprefix("gpu-") for u in uuids]
    hits = [i for i, u in enumerate(bare) if u and u.startswith(key)]
    return hits[0] if len(hits) == 1 else None


def assign_indices(backend: str, physical: Sequence[PhysicalGpu],
                   runtime_bus_ids: Sequence[str | None] | None,
                   visible_spec: str | None) -> list[VisibleDevice]:
    """Number ``physical`` GPUs as the runtime does.

    With ``runtime_bus_ids`` (the PCI bus id of runtime device 0, 1, ...) each runtime device is
    matched to its physical GPU by bus id; a runtime device with no match is skipped. Without
    them, ``visible_spec`` (a ``*_VISIBLE_DEVICES`` value) is applied to ``physical``'s order.
    """
    if runtime_bus_ids is not None:
        by_bus = {p.pci_bus_id: p for p in physical if p.pci_bus_id}
        out = []
        for index, bus in enumerate(runtime_bus_ids):
            match = by_bus.get(normalize_pci_bus_id(bus)) if bus else None
            if match is not None:
                out.append(VisibleDevice(backend, index, match.name, match.pci_device_id))
        return out
    selected = apply_visible_devices(physical, visible_spec, lambda p: p.uuid)
    return [VisibleDevice(backend, i, p.name, p.pci_device_id) for i, p in enumerate(selected)]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(read: Callable[[], _T]) -> _T | None:
    """``read()``, or None when the library cannot answer (an identity field a driver lacks
    leaves the device listed without it)."""
    try:
        return read()
    except Exception:
        return None


def _import(name: str) -> Any | None:
    """Import an optional module, or None when it is absent or fails to load."""
    try:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            return None
        return importlib.import_module(name)
    except Exception:  # a broken install (missing shared library) counts as absent
        return None


def driver_present(paths: Sequence[str]) -> bool:
    """Whether a GPU driver's device nodes exist (always True off Linux, where we cannot tell):
    keeps a CPU-only Linux machine from importing PyTorch just to learn it has no GPU."""
    return not sys.platform.startswith("linux") or any(os.path.exists(p) for p in paths)


_NVIDIA_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia")
_AMD_NODES = ("/dev/kfd",)


# ---------------------------------------------------------------- NVIDIA

def nvml_gpus(nvml: Any) -> list[PhysicalGpu]:
    """Every GPU NVML lists, in NVML's order (raises what NVML raises)."""
    nvml.nvmlInit()
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            pci = _optional(lambda: nvml.nvmlDeviceGetPciInfo(handle))
            bus_id = _optional(lambda: normalize_pci_bus_id(_text(pci.busId))) if pci is not None else None
            device_id = _optional(lambda: format_pci_id(int(pci.pciDeviceId) >> 16)) if pci is not None else None
            uuid = _optional(lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
            out.append(PhysicalGpu(_text(nvml.nvmlDeviceGetName(handle)), bus_id, device_id, uuid))
        return out
    finally:
        nvml.nvmlShutdown()


def _cuda_runtime_bus_ids() -> list[str | None] | None:
    """PCI bus ids of the CUDA runtime's devices 0, 1, ... (CuPy, else PyTorch), or None."""
    cupy = _import("cupy")
    if cupy is not None:
        try:
            count = cupy.cuda.runtime.getDeviceCount()
            return [cupy.cuda.Device(i).pci_bus_id for i in range(count)]
        except Exception:
            pass
    torch = _import("torch")
    if torch is not None and getattr(torch.version, "cuda", None) and torch.cuda.is_available():
        return _torch_bus_ids(torch)
    return None


def _torch_bus_ids(torch: Any) -> list[str | None] | None:
    bus_ids: list[str | None] = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        bus = getattr(props, "pci_bus_id", None)
        if bus is None:  # an older torch: no PCI location in the properties
            return None
        bus_ids.append(f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0")
    return bus_ids


def _torch_gpus(torch: Any, backend: str) -> list[VisibleDevice]:
    out = []
    bus_ids = _torch_bus_ids(torch)
    for i in range(torch.cuda.device_count()):
        bus = bus_ids[i] if bus_ids else None
        out.append(VisibleDevice(backend, i, torch.cuda.get_device_name(i),
                                 sysfs_pci_device_id(bus) if bus else None))
    return out


def visible_nvidia_gpus() -> list[VisibleDevice]:
    nvml = _import("pynvml")
    if nvml is not None:
        try:
            physical = nvml_gpus(nvml)
        except Exception:
            physical = None
        if physical:
            return assign_indices("cuda", physical, _cuda_runtime_bus_ids(),
                                  os.environ.get("CUDA_VISIBLE_DEVICES"))
    torch = _import("torch") if driver_present(_NVIDIA_NODES) else None
    if torch is not None and getattr(torch.version, "cuda", None):
        try:
            if torch.cuda.is_available():
                return _torch_gpus(torch, "cuda")
        except Exception:
            return []
    return []


# ---------------------------------------------------------------- AMD

def amdsmi_gpus(amdsmi: Any) -> list[PhysicalGpu]:
    """Every GPU amdsmi lists, in amdsmi's order (raises what amdsmi raises)."""
    amdsmi.amdsmi_init()
    try:
        out = []
        for handle in amdsmi.amdsmi_get_processor_handles():
            asic: dict[str, Any] = _optional(lambda: dict(amdsmi.amdsmi_get_gpu_asic_info(handle))) or {}
            bus_id = _optional(lambda: normalize_pci_bus_id(_text(amdsmi.amdsmi_get_gpu_device_bdf(handle))))
            uuid = _optional(lambda: _text(amdsmi.amdsmi_get_gpu_device_uuid(handle)))
            name = str(asic.get("market_name") or "AMD GPU")
            out.append(PhysicalGpu(name, bus_id, format_pci_id(asic.get("device_id")), uuid))
        return out
    finally:
        amdsmi.amdsmi_shut_down()


def _hip_visible_spec() -> tuple[str | None, str | None]:
    """(ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES or else CUDA_VISIBLE_DEVICES)."""
    hip = os.environ.get("HIP_VISIBLE_DEVICES")
    return os.environ.get("ROCR_VISIBLE_DEVICES"), hip if hip is not None else os.environ.get("CUDA_VISIBLE_DEVICES")


def visible_amd_gpus() -> list[VisibleDevice]:
    torch = _import("torch") if driver_present(_AMD_NODES) else None
    hip_torch = torch if torch is not None and getattr(torch.version, "hip", None) else None
    amdsmi = _import("amdsmi")
    if amdsmi is not None:
        try:
            physical = amdsmi_gpus(amdsmi)
        except Exception:
            physical = None
        if physical:
            bus_ids = None
            if hip_torch is not None:
                try:
                    bus_ids = _torch_bus_ids(hip_torch) if hip_torch.cuda.is_available() else []
                except Exception:
                    bus_ids = None
            if bus_ids is not None:
                return assign_indices("rocm", physical, bus_ids, None)
            rocr, hip = _hip_visible_spec()
            selected = apply_visible_devices(physical, rocr, lambda p: p.uuid)
            return assign_indices("rocm", selected, None, hip)
    if hip_torch is not None:
        try:
            if hip_torch.cuda.is_available():
                return _torch_gpus(hip_torch, "rocm")
        except Exception:
            return []
    return []


def visible_gpus() -> list[VisibleDevice]:
    """Every NVIDIA and AMD GPU this process can use; ``[]`` when none (or no library)."""
    return visible_nvidia_gpus() + visible_amd_gpus()
