"""What the cuda and rocm backends share: the cache-flush size, telemetry reads, the
clock-based sample discard, and copies between two GPUs (:class:`PeerCopy`, through PyTorch on
both backends)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from ..errors import UsageError
from ..measure.conditions import DeviceTelemetry
from .nvml import sm_clock_discard_reason, sm_clock_is_low


def flush_bytes(l2_cache_bytes: int) -> int:
    """Bytes written to evict the last-level cache: twice its size (at least 1 MiB), a multiple of 4 bytes."""
    return max(2 * int(l2_cache_bytes), 1 << 20) // 4 * 4


class TelemetryDiscards:
    """Mixin for a GPU backend with ``_telemetry`` (NvmlTelemetry / AmdsmiTelemetry or None),
    ``expected_sm_clock_mhz`` and ``sm_clock_threshold``: a sample after which the graphics clock
    is under the threshold of its expected clock while the device reports throttling is
    discarded (see :func:`~pytest_charz.devices.nvml.sm_clock_discard_reason`)."""

    _telemetry: Any
    expected_sm_clock_mhz: float | None
    sm_clock_threshold: float

    def telemetry(self) -> DeviceTelemetry | None:
        return self._telemetry.read() if self._telemetry is not None else None

    def check_sample(self) -> str | None:
        if self._telemetry is None:
            return None
        clock = self._telemetry.sm_clock_mhz()
        if not sm_clock_is_low(clock, self.expected_sm_clock_mhz, self.sm_clock_threshold):
            return None             # the common case: one telemetry call per sample
        return sm_clock_discard_reason(clock, self.expected_sm_clock_mhz, self.sm_clock_threshold,
                                       throttled=self._telemetry.throttling())


# ---------------------------------------------------------------- copies between two GPUs

#: Directions of a peer copy: from the bound GPU to its peer, back, and both at once.
PEER_DIRECTIONS = ("to-peer", "from-peer", "bidirectional")


def peer_of(bound_index: int, visible_indices: Sequence[int]) -> int | None:
    """The peer GPU of the bound one for peer copies: the next visible index after it, wrapping
    around (so xdist workers, one per GPU, measure every neighbouring pair); None when the bound
    GPU is the only one."""
    others = sorted({int(i) for i in visible_indices} - {int(bound_index)})
    if not others:
        return None
    later = [i for i in others if i > bound_index]
    return (later or others)[0]


def check_direction(direction: str) -> str:
    if direction not in PEER_DIRECTIONS:
        raise UsageError(f"peer copy direction {direction!r} is not one of {', '.join(PEER_DIRECTIONS)}")
    return direction


def check_peer(platform: str, bound_index: int, peer_index: int, peers: Sequence[int]) -> int:
    """``peer_index`` if it is one of ``peers`` (the other visible devices), else a UsageError
    naming them."""
    if peer_index not in peers:
        raise UsageError(f"{platform} device {peer_index} is not a peer of device {bound_index}; "
                         f"visible peers: {list(peers) or 'none'}")
    return peer_index


@dataclass(frozen=True)
class PeerRoute:
    """One direction of a peer copy: PyTorch issues a cross-device ``copy_`` on the source's
    current stream, fenced both ways with the destination's current stream."""

    src: Any
    dst: Any
    src_stream: Any
    dst_stream: Any
    expected: Any        # what ``dst`` must hold afterwards (a CPU tensor)


class PeerCopy:
    """A copy between the bound GPU and one peer GPU, and the device that times it: pass it as
    ``charz.measure(copy.run, work=..., device=copy)`` (every other attribute is the bound
    device's).

    The copy is PyTorch's cross-device ``Tensor.copy_`` (``cudaMemcpyPeerAsync`` / HIP's, or the
    driver's copy staged through host memory when the two GPUs cannot reach each other);
    PyTorch enables peer access itself wherever the driver allows it, so :attr:`peer_access`
    (both directions) tells which path ran. A batch is timed with device events on the
    destination's stream, after both GPUs are synchronized. Both directions at once: the second
    direction runs on its own pair of streams, joined to the first at the start event and before
    the end event, so the time covers the two copies running together.
    """

    def __init__(self, device: Any, torch: Any, own_stream: Any, peer_index: int, direction: str,
                 data: Any) -> None:
        check_direction(direction)
        own = int(device.index)
        if peer_index == own:
            raise UsageError(f"a peer copy needs two GPUs; the peer given is the bound one ({own})")
        cuda = torch.cuda
        self._device, self._torch, self.peer_index, self.direction = device, torch, int(peer_index), direction
        self.peer_access = bool(cuda.can_device_access_peer(own, peer_index)
                                and cuda.can_device_access_peer(peer_index, own))
        own_device, peer_device = torch.device("cuda", own), torch.device("cuda", peer_index)
        peer_streams = [cuda.Stream(device=peer_device) for _ in range(2 if direction == "bidirectional" else 1)]

        def route(src_device: Any, dst_device: Any, src_stream: Any, dst_stream: Any, values: Any) -> PeerRoute:
            src = values.to(src_device)
            dst = torch.empty_like(src, device=dst_device)
            return PeerRoute(src, dst, src_stream, dst_stream, values)

        routes = []
        if direction in ("to-peer", "bidirectional"):
            routes.append(route(own_device, peer_device, own_stream, peer_streams[0], data))
        if direction == "from-peer":
            routes.append(route(peer_device, own_device, peer_streams[0], own_stream, data))
        if direction == "bidirectional":     # other bytes back, so a swapped buffer shows
            routes.append(route(peer_device, own_device, peer_streams[1], cuda.Stream(device=own_device),
                                data.flip(0)))
        self.routes: tuple[PeerRoute, ...] = tuple(routes)
        cuda.synchronize(own_device)
        cuda.synchronize(peer_device)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    @property
    def path(self) -> str:
        """``direct`` (peer access) or ``through-host`` (the driver stages the copy)."""
        return "direct" if self.peer_access else "through-host"

    @property
    def bytes_per_direction(self) -> int:
        return int(self.routes[0].src.numel() * self.routes[0].src.element_size())

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[Any]:
        """The bound device's stream context with the first direction's streams current on both GPUs."""
        cuda, first = self._torch.cuda, self.routes[0]
        with self._device.on_stream(), cuda.stream(first.src_stream), cuda.stream(first.dst_stream):
            yield first.dst_stream

    def run(self) -> None:
        """One copy (each direction once), queued; inside :meth:`on_stream` (the timed batches are)."""
        first = self.routes[0]
        if len(self.routes) == 1:
            first.dst.copy_(first.src, non_blocking=True)
            return
        cuda = self._torch.cuda
        for route in self.routes:
            with cuda.stream(route.src_stream), cuda.stream(route.dst_stream):
                route.dst.copy_(route.src, non_blocking=True)

    def check(self) -> list[str]:
        """What differs from its source, per direction (empty when every copy is right)."""
        self.synchronize()
        wrong = []
        for route in self.routes:
            if not self._torch.equal(route.dst.cpu(), route.expected):
                wrong.append(f"{route.src.device} -> {route.dst.device}: the copy of {route.expected.numel()} "
                             "bytes does not match its source")
        return wrong

    def synchronize(self) -> None:
        self._device.synchronize()
        self._torch.cuda.synchronize(self.peer_index)

    def time_batch(self, fn: Callable[[], Any], inner: int, work: Any = None) -> float:
        """Seconds between events on the (first) destination's stream around ``inner`` calls of
        ``fn``, both GPUs synchronized first; other directions' streams join at both events."""
        if not isinstance(inner, int) or inner < 1:
            raise UsageError(f"inner must be a positive int, got {inner!r}")
        cuda, first = self._torch.cuda, self.routes[0]
        self.synchronize()
        with self.on_stream():
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record(first.dst_stream)
            for route in self.routes[1:]:
                route.dst_stream.wait_event(start)
            for _ in range(inner):
                fn()
            for route in self.routes[1:]:
                done = cuda.Event()
                done.record(route.dst_stream)
                first.dst_stream.wait_event(done)
            end.record(first.dst_stream)
            end.synchronize()
        return float(start.elapsed_time(end)) * 1e-3
