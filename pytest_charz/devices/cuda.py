"""The ``cuda`` backend: one NVIDIA GPU through CuPy (raw kernels), PyTorch (GEMM) and NVML.

Timing. CUDA events recorded around the whole batch on the device's own stream, read with
``cupy.cuda.get_elapsed_time``. The device owns one non-blocking CuPy stream and, while a
batch runs (and inside :meth:`CudaDevice.on_stream`), makes it the current stream of both
libraries: CuPy's (the stream is entered as a context) and PyTorch's (the same stream wrapped as
``torch.cuda.ExternalStream``). Raw kernels and PyTorch ops therefore queue on the one stream the
events are recorded on, so the events bracket exactly the batch's work. Before the start event
the whole device is synchronized, so nothing queued earlier (on any stream) runs inside the
measured interval. Then a one-thread ``hold`` kernel keeps the stream busy for
``BATCH_HOLD_S``, longer than the host takes to issue the batch's first call, and the start event
is queued behind it: the interval starts with the first call already waiting, so it does not
count the host's launch of that call (nvbench's blocking kernel does the same with a host flag).
On an H200, a triad over 128 MiB arrays timed in batches of two read 3.66 TB/s without the hold,
3.85 with it and 3.87 in batches of ten (the first launch's host time, counted once per batch).

Discarding throttled samples. After each sample :meth:`CudaDevice.check_sample` reads the SM
clock through NVML; when it is under 75% of the expected SM clock (NVML's maximum SM clock
unless given; nvbench's default ``--throttle-threshold``) and a throttle reason is active
(power cap, thermal, hardware slowdown or power brake), it answers
``"sm-clock-below-threshold"``. A low clock with only ``gpu_idle`` or ``applications_clocks``
set is a GPU idling between short kernels or clocks locked low, not a slowed sample. No NVML,
no reading: no discard.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import UsageError, require_extra
from .base import DeviceInfo
from .detect_gpu import normalize_pci_bus_id, sysfs_pci_device_id
from .gpu_common import PeerCopy, TelemetryDiscards, check_peer, flush_bytes
from .nvml import SM_CLOCK_THRESHOLD, NvmlTelemetry

if TYPE_CHECKING:
    from ..work import Work

#: Resolution of CUDA events: "around 0.5 microseconds" (CUDA Runtime API reference,
#: ``cudaEventElapsedTime``).
CUDA_EVENT_RESOLUTION_S = 0.5e-6

#: How long the ``hold`` kernel keeps the stream busy before a batch's start event: more than
#: the host takes to issue a CuPy kernel or a PyTorch op from Python (some 5-20 us).
BATCH_HOLD_S = 50e-6
#: SM clock the hold's cycle count assumes when the device reports none.
DEFAULT_HOLD_CLOCK_MHZ = 2000.0


def format_cuda_version(version: int) -> str:
    """CUDA's integer version (``12040``) as ``"12.4"``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def format_uuid(raw: bytes | str) -> str:
    """A 16-byte CUDA UUID as NVML writes it: ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``."""
    if isinstance(raw, str):
        return raw if raw.upper().startswith("GPU-") else f"GPU-{raw}"
    h = bytes(raw).hex()
    if len(h) != 32:
        raise ValueError(f"a CUDA UUID has 16 bytes, got {len(raw)}")
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _optional_torch() -> Any | None:
    """PyTorch with CUDA, when it is installed; None otherwise (it is optional here)."""
    try:
        if importlib.util.find_spec("torch") is None:
            return None
        torch = importlib.import_module("torch")
    except Exception:
        return None
    try:
        usable = bool(getattr(torch.version, "cuda", None)) and bool(torch.cuda.is_available())
    except Exception:   # a wheel built for a newer CUDA than the driver: CuPy cases still run
        usable = False
    return torch if usable else None


class CudaDevice(TelemetryDiscards):
    """One NVIDIA GPU, by CUDA device index (as ``CUDA_VISIBLE_DEVICES`` numbers them)."""

    def __init__(self, index: int = 0, *, expected_sm_clock_mhz: float | None = None,
                 sm_clock_threshold: float = SM_CLOCK_THRESHOLD,
                 cupy: Any = None, torch: Any = None, nvml: Any = None) -> None:
        cp = cupy if cupy is not None else require_extra("cupy", "cuda")
        self._cp = cp
        count = cp.cuda.runtime.getDeviceCount()
        if not 0 <= index < count:
            raise UsageError(f"CUDA device index {index} does not exist; {count} device(s) visible")
        self.index = index
        self._device = cp.cuda.Device(index)
        self._props: dict[str, Any] = dict(cp.cuda.runtime.getDeviceProperties(index))
        self._torch = torch if torch is not None else _optional_torch()
        with self._device:
            self.stream = cp.cuda.Stream(non_blocking=True)
        self._torch_stream = None
        #: Why PyTorch is not used on this device, when it is not (its cases skip with it).
        self.torch_unavailable: str | None = None if self._torch is not None else "PyTorch with usable CUDA not found"
        if self._torch is not None:
            try:
                self._torch_stream = self._torch.cuda.ExternalStream(self.stream.ptr, device=index)
            except Exception as exc:    # e.g. PyTorch's CUDA runtime cannot use this driver
                self.torch_unavailable = f"{type(exc).__name__}: {exc}"
                self._torch = None
        self.pci_bus_id = normalize_pci_bus_id(self._device.pci_bus_id)
        self._telemetry: NvmlTelemetry | None = None
        #: Why there is no telemetry, when there is none.
        self.telemetry_unavailable: str | None = None
        try:
            self._telemetry = NvmlTelemetry(pci_bus_id=self.pci_bus_id, nvml=nvml)
        except Exception as exc:  # no pynvml, no driver access, GPU not found by NVML
            self.telemetry_unavailable = f"{type(exc).__name__}: {exc}"
        self.sm_clock_threshold = sm_clock_threshold
        if expected_sm_clock_mhz is None and self._telemetry is not None:
            expected_sm_clock_mhz = self._telemetry.max_sm_clock_mhz
        if expected_sm_clock_mhz is None and self._props.get("clockRate"):
            expected_sm_clock_mhz = self._props["clockRate"] / 1000.0  # kHz -> MHz
        self.expected_sm_clock_mhz = expected_sm_clock_mhz
        self._hold_cycles = int(BATCH_HOLD_S * 1e6 * (expected_sm_clock_mhz or DEFAULT_HOLD_CLOCK_MHZ))
        #: Why batches are timed without the ``hold`` kernel, when its module could not be built.
        self.hold_unavailable: str | None = None
        self._flush_buffer: Any = None
        self._flush_value = 0
        self._kernels: Any = None
        self._info = self._read_info()

    # ------------------------------------------------------------ identity
    @property
    def backend(self) -> str:
        return "cuda"

    @property
    def info(self) -> DeviceInfo:
        return self._info

    @property
    def sm_count(self) -> int:
        return int(self._props["multiProcessorCount"])

    @property
    def l2_cache_bytes(self) -> int:
        return int(self._props["l2CacheSize"])

    def _read_info(self) -> DeviceInfo:
        cp, props = self._cp, self._props
        name = props.get("name", b"")
        ids: dict[str, str] = {"pci_bus_id": self.pci_bus_id,
                               "compute_capability": f"{props.get('major', '?')}.{props.get('minor', '?')}"}
        versions: dict[str, str] = {
            "cuda_driver": format_cuda_version(cp.cuda.runtime.driverGetVersion()),
            "cuda_runtime": format_cuda_version(cp.cuda.runtime.runtimeGetVersion()),
            "cupy": str(cp.__version__),
        }
        # CuPy hands the 16-byte UUID over as a C string: cut at its first zero byte, or run on
        # into the next field. Only a full 16 bytes is trusted (NVML's UUID replaces it anyway).
        raw = props.get("uuid")
        if isinstance(raw, (bytes, bytearray)) and len(raw) >= 16:
            with contextlib.suppress(ValueError):
                ids["uuid"] = format_uuid(bytes(raw[:16]))
        if self._telemetry is not None:
            nvml_ids = self._telemetry.identity()
            for key in ("uuid", "pci_device_id"):
                if key in nvml_ids:
                    ids[key] = nvml_ids[key]
            if "driver" in nvml_ids:
                versions["driver"] = nvml_ids["driver"]
        if "pci_device_id" not in ids:
            device_id = sysfs_pci_device_id(self.pci_bus_id)
            if device_id:
                ids["pci_device_id"] = device_id
        if self._torch is not None:
            versions["torch"] = str(self._torch.__version__)
        return DeviceInfo(backend="cuda", index=self.index,
                          name=name.decode() if isinstance(name, bytes) else str(name),
                          ids=ids, versions=versions)

    # ------------------------------------------------------------ running and timing
    @contextlib.contextmanager
    def on_stream(self) -> Iterator[Any]:
        """Make this device and its stream current for CuPy and PyTorch inside the block."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._device)
            stack.enter_context(self.stream)
            if self._torch is not None and self._torch_stream is not None:
                stack.enter_context(self._torch.cuda.stream(self._torch_stream))
            yield self.stream

    def kernels(self) -> Any:
        """The raw kernels of ``kernels/gpu_kernels.cu``, compiled for this device (once)."""
        if self._kernels is None:
            from ..kernels.gpu import GpuKernels

            with self._device:
                self._kernels = GpuKernels(self._cp)
        return self._kernels

    def timer_resolution_s(self) -> float:
        return CUDA_EVENT_RESOLUTION_S

    def peer_indices(self) -> list[int]:
        """The other CUDA devices this process sees (candidates for peer copies)."""
        return [i for i in range(self._cp.cuda.runtime.getDeviceCount()) if i != self.index]

    def peer_copy(self, peer_index: int, direction: str, data: Any) -> PeerCopy:
        """A copy of ``data`` (a CPU uint8 tensor) between this GPU and GPU ``peer_index`` in
        ``direction`` (``gpu_common.PEER_DIRECTIONS``), through PyTorch on this device's stream."""
        if self._torch is None or self._torch_stream is None:
            raise UsageError(f"peer copies go through PyTorch, which this device cannot use: {self.torch_unavailable}")
        check_peer("CUDA", self.index, peer_index, self.peer_indices())
        return PeerCopy(self, self._torch, self._torch_stream, peer_index, direction, data)

    def time_batch(self, fn: Callable[[], Any], inner: int, work: "Work | None" = None) -> float:
        """Seconds between CUDA events recorded before and after ``inner`` calls of ``fn`` on
        the device's stream (the end event waited for). ``work`` is not needed: the events
        time what ``fn`` really runs."""
        if not isinstance(inner, int) or inner < 1:
            raise UsageError(f"inner must be a positive int, got {inner!r}")
        cp = self._cp
        with self.on_stream():
            self._device.synchronize()
            self._hold_stream()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(self.stream)
            for _ in range(inner):
                fn()
            end.record(self.stream)
            end.synchronize()
        return float(cp.cuda.get_elapsed_time(start, end)) * 1e-3

    def _hold_stream(self) -> None:
        """Queue the ``hold`` kernel on the current (the device's) stream; nothing when the
        kernels cannot be built here, with the reason kept in ``hold_unavailable``."""
        if self.hold_unavailable is not None:
            return
        try:
            self.kernels().hold(self._hold_cycles)
        except Exception as exc:     # no compiler for the kernels: time as before, and say why
            self.hold_unavailable = f"{type(exc).__name__}: {exc}"

    def synchronize(self) -> None:
        self._device.synchronize()

    def flush_caches(self) -> None:
        """Write a buffer of twice the L2 size on the device's stream, and wait for it."""
        with self.on_stream():
            if self._flush_buffer is None:
                self._flush_buffer = self._cp.empty(flush_bytes(self.l2_cache_bytes) // 4, dtype="int32")
            self._flush_value ^= 1  # a different value each time: every line is really written
            self._flush_buffer.fill(self._flush_value)
        self.stream.synchronize()

    def close(self) -> None:
        self._flush_buffer = None
        self._kernels = None
        if self._telemetry is not None:
            self._telemetry.close()
            self._telemetry = None
