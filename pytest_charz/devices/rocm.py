"""The ``rocm`` backend: one AMD GPU through PyTorch's ROCm (HIP) build and amdsmi.

PyTorch on ROCm keeps the ``torch.cuda`` API (``torch.cuda.Event`` is a HIP event,
``torch.cuda.Stream`` a HIP stream). Timing: HIP events recorded around the whole batch on the
device's own stream, which is PyTorch's current stream while the batch runs; the device is
synchronized before the start event. Telemetry and the clock check go through amdsmi, with the
same rule as the ``cuda`` backend: a sample taken while the graphics (shader) clock is under 75%
of its maximum is discarded as ``"sm-clock-below-threshold"``.

Cold samples: the last-level cache of CDNA3 (MI300X, MI300A, MI325X) and CDNA4 (MI350) parts is
the 256 MB AMD Infinity Cache behind the L2, which the device properties do not report; the
flush buffer is sized from it for those architectures (AMD CDNA 3 Architecture white paper,
"256 MB AMD Infinity Cache"; AMD CDNA 4 Architecture white paper, likewise 256 MB).
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import UsageError, require_extra
from .amdsmi_telemetry import AmdsmiTelemetry
from .base import DeviceInfo
from .detect_gpu import sysfs_pci_device_id
from .gpu_common import PeerCopy, TelemetryDiscards, check_peer, flush_bytes
from .nvml import SM_CLOCK_THRESHOLD

if TYPE_CHECKING:
    from ..work import Work

#: Resolution of HIP events: about 1 microsecond (HIP runtime API reference,
#: ``hipEventElapsedTime``).
HIP_EVENT_RESOLUTION_S = 1e-6

#: Last-level (Infinity) cache bytes by ``gcnArchName`` prefix, where it is larger than the L2.
INFINITY_CACHE_BYTES = {"gfx942": 256 * 2**20, "gfx950": 256 * 2**20}


def last_level_cache_bytes(arch_name: str, l2_cache_bytes: int) -> int:
    """The cache a cold sample must evict: the Infinity Cache where the arch has one, else L2."""
    base = arch_name.split(":", 1)[0]
    return max(INFINITY_CACHE_BYTES.get(base, 0), int(l2_cache_bytes))


def _props_bus_id(props: Any) -> str | None:
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    return f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"


class RocmDevice(TelemetryDiscards):
    """One AMD GPU, by HIP device index (as ``HIP_VISIBLE_DEVICES`` numbers them)."""

    def __init__(self, index: int = 0, *, expected_sm_clock_mhz: float | None = None,
                 sm_clock_threshold: float = SM_CLOCK_THRESHOLD, llc_bytes: int | None = None,
                 torch: Any = None, amdsmi: Any = None) -> None:
        torch = torch if torch is not None else require_extra("torch", "rocm")
        if not getattr(torch.version, "hip", None):
            raise UsageError("the installed torch is not a ROCm (HIP) build; install PyTorch for ROCm "
                             "to drive AMD GPUs")
        count = torch.cuda.device_count()
        if not 0 <= index < count:
            raise UsageError(f"HIP device index {index} does not exist; {count} device(s) visible")
        self._torch = torch
        self.index = index
        self._device = torch.device("cuda", index)
        self._props = torch.cuda.get_device_properties(index)
        self.stream = torch.cuda.Stream(device=self._device)
        self.pci_bus_id = _props_bus_id(self._props)
        self._telemetry: AmdsmiTelemetry | None = None
        self.telemetry_unavailable: str | None = None
        try:
            if self.pci_bus_id is not None:
                self._telemetry = AmdsmiTelemetry(pci_bus_id=self.pci_bus_id, amdsmi=amdsmi)
            elif count == 1:  # no PCI location to match by, but only one GPU to match
                self._telemetry = AmdsmiTelemetry(0, amdsmi=amdsmi)
            else:
                self.telemetry_unavailable = "this torch reports no PCI bus id to find the GPU in amdsmi by"
        except Exception as exc:  # no amdsmi, no driver access, GPU not found by amdsmi
            self.telemetry_unavailable = f"{type(exc).__name__}: {exc}"
        self.sm_clock_threshold = sm_clock_threshold
        if expected_sm_clock_mhz is None and self._telemetry is not None:
            expected_sm_clock_mhz = self._telemetry.max_sm_clock_mhz
        self.expected_sm_clock_mhz = expected_sm_clock_mhz
        arch = str(getattr(self._props, "gcnArchName", ""))
        self.llc_bytes = llc_bytes if llc_bytes is not None else last_level_cache_bytes(
            arch, int(getattr(self._props, "L2_cache_size", 0)))
        self._flush_buffer: Any = None
        self._flush_value = 0
        self._info = self._read_info(arch)

    @property
    def backend(self) -> str:
        return "rocm"

    @property
    def info(self) -> DeviceInfo:
        return self._info

    @property
    def cu_count(self) -> int:
        return int(self._props.multi_processor_count)

    def _read_info(self, arch: str) -> DeviceInfo:
        torch = self._torch
        ids: dict[str, str] = {"arch": arch} if arch else {}
        if self.pci_bus_id:
            ids["pci_bus_id"] = self.pci_bus_id
        uuid = getattr(self._props, "uuid", None)
        if uuid:
            ids["uuid"] = str(uuid)
        versions = {"torch": str(torch.__version__), "hip": str(torch.version.hip)}
        if self._telemetry is not None:
            smi = self._telemetry.identity()
            for key in ("uuid", "pci_device_id"):
                if key in smi:
                    ids[key] = smi[key]
            if "driver" in smi:
                versions["driver"] = smi["driver"]
        if "pci_device_id" not in ids and self.pci_bus_id:
            device_id = sysfs_pci_device_id(self.pci_bus_id)
            if device_id:
                ids["pci_device_id"] = device_id
        return DeviceInfo(backend="rocm", index=self.index, name=str(self._props.name), ids=ids,
                          versions=versions)

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[Any]:
        """Make this device's stream PyTorch's current stream inside the block."""
        with self._torch.cuda.stream(self.stream):
            yield self.stream

    def timer_resolution_s(self) -> float:
        return HIP_EVENT_RESOLUTION_S

    def peer_indices(self) -> list[int]:
        """The other HIP devices this process sees (candidates for peer copies)."""
        return [i for i in range(self._torch.cuda.device_count()) if i != self.index]

    def peer_copy(self, peer_index: int, direction: str, data: Any) -> PeerCopy:
        """A copy of ``data`` (a CPU uint8 tensor) between this GPU and GPU ``peer_index`` in
        ``direction`` (``gpu_common.PEER_DIRECTIONS``), through PyTorch on this device's stream."""
        check_peer("HIP", self.index, peer_index, self.peer_indices())
        return PeerCopy(self, self._torch, self.stream, peer_index, direction, data)

    def time_batch(self, fn: Callable[[], Any], inner: int, work: "Work | None" = None) -> float:
        """Seconds between HIP events recorded before and after ``inner`` calls of ``fn`` on
        the device's stream (the end event waited for). ``work`` is not needed: the events
        time what ``fn`` really runs."""
        if not isinstance(inner, int) or inner < 1:
            raise UsageError(f"inner must be a positive int, got {inner!r}")
        cuda = self._torch.cuda
        with self.on_stream():
            cuda.synchronize(self._device)
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record(self.stream)
            for _ in range(inner):
                fn()
            end.record(self.stream)
            end.synchronize()
        return float(start.elapsed_time(end)) * 1e-3

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self._device)

    def flush_caches(self) -> None:
        """Write a buffer of twice the last-level cache on the device's stream, and wait."""
        with self.on_stream():
            if self._flush_buffer is None:
                self._flush_buffer = self._torch.empty(flush_bytes(self.llc_bytes) // 4,
                                                       dtype=self._torch.int32, device=self._device)
            self._flush_value ^= 1
            self._flush_buffer.fill_(self._flush_value)
        self.stream.synchronize()

    def close(self) -> None:
        self._flush_buffer = None
        if self._telemetry is not None:
            self._telemetry.close()
            self._telemetry = None
