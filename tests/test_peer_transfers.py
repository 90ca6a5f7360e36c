"""Peer copies between two GPUs without a GPU: which peer and which cases a bound GPU gets, the
skip where there is no second GPU, the copy and its timing on a simulated pair of GPUs (a fake
``torch.cuda`` whose streams keep a timeline), and the profile's reading of ``transfer:peer``
with both directions at once."""
from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from charz_factories import case_json, make_run

from pytest_charz.devices.gpu_common import PEER_DIRECTIONS, PeerCopy, check_direction, peer_of
from pytest_charz.errors import UsageError
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.profile import build_profile

SUITES = Path(__file__).resolve().parent.parent / "suites"
MIB = 1024**2


def movement_suite() -> Any:
    if str(SUITES) not in sys.path:
        sys.path.insert(0, str(SUITES))
    return importlib.import_module("test_movement")


# ---------------------------------------------------------------- which peer, which cases


def test_the_peer_is_the_next_visible_gpu_wrapping_around() -> None:
    assert peer_of(0, [1, 2, 3]) == 1
    assert peer_of(3, [0, 1, 2]) == 0
    assert peer_of(1, [0, 1, 2, 1]) == 2
    assert peer_of(0, []) is None and peer_of(0, [0]) is None
    with pytest.raises(UsageError, match="to-peer, from-peer, bidirectional"):
        check_direction("sideways")


def test_cases_skip_with_the_reason_without_a_second_gpu() -> None:
    movement = movement_suite()
    (cpu,) = movement.peer_transfer_params("cpu", 0, [], 1 << 30)
    assert cpu.id == "n/a" and "the bound device is cpu" in cpu.marks[0].kwargs["reason"]
    (alone,) = movement.peer_transfer_params("cuda", 0, [], 1 << 30)
    assert alone.marks[0].name == "skip"
    assert alone.marks[0].kwargs["reason"] == "one cuda device visible (cuda 0): peer transfers need a second"


def test_two_gpus_get_every_direction_over_the_copy_sizes() -> None:
    movement = movement_suite()
    params = movement.peer_transfer_params("rocm", 1, [0, 2, 3], 256 * MIB)
    sizes = movement.copy_sizes(256 * MIB)
    assert len(params) == len(PEER_DIRECTIONS) * len(sizes)
    assert {p.values[0] for p in params} == {(d, 2, s) for d in PEER_DIRECTIONS for s in sizes}
    ids = [p.id for p in params]
    assert "to-peer-gpu1-gpu2-4KiB" in ids and "bidirectional-gpu1-gpu2-256MiB" in ids
    quick = {p.values[0][2] for p in params if not p.marks and p.values[0][0] == "from-peer"}
    assert quick == {4096, 64 * 1024, MIB, 16 * MIB, 256 * MIB}


def test_off_a_gpu_the_suite_collects_one_skipping_peer_case(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(str(SUITES / "test_movement.py"), "-p", "no:cacheprovider", "-rs",
                                           "-k", "peer", "--charz-out", str(pytester.path / "run.json"))
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*a GPU peer transfer case; the bound device is cpu*"])


# ---------------------------------------------------------------- a simulated pair of GPUs

class FakeDevice:
    def __init__(self, kind: str, index: int) -> None:
        self.type, self.index = kind, index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeDevice) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __repr__(self) -> str:
        return f"{self.type}:{self.index}"


class FakeStream:
    def __init__(self, gpus: "FakeGpus", index: int, name: str) -> None:
        self.gpus, self.index, self.name, self.t = gpus, index, name, 0.0

    def wait_event(self, event: "FakeEvent") -> None:
        self.t = max(self.t, event.t)
        self.gpus.log.append(("wait", self.name, event.name))


class FakeEvent:
    count = 0

    def __init__(self, enable_timing: bool = False) -> None:
        FakeEvent.count += 1
        self.name, self.t, self.stream = f"event{FakeEvent.count}", 0.0, None

    def record(self, stream: FakeStream) -> None:
        self.t, self.stream = stream.t, stream
        stream.gpus.log.append(("record", stream.name, self.name))

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert end.stream is not None and self.stream is not None
        assert end.stream.index == self.stream.index, "events of two devices cannot be compared"
        return (end.t - self.t) * 1e3


class FakeTensor:
    def __init__(self, gpus: "FakeGpus", values: np.ndarray, device: FakeDevice) -> None:
        self.gpus, self.values, self.device = gpus, values, device

    def to(self, device: FakeDevice) -> "FakeTensor":
        return FakeTensor(self.gpus, self.values.copy(), device)

    def cpu(self) -> "FakeTensor":
        return FakeTensor(self.gpus, self.values.copy(), FakeDevice("cpu", 0))

    def flip(self, dim: int) -> "FakeTensor":
        return FakeTensor(self.gpus, self.values[::-1].copy(), self.device)

    def numel(self) -> int:
        return int(self.values.size)

    def element_size(self) -> int:
        return 1

    def copy_(self, src: "FakeTensor", non_blocking: bool = False) -> None:
        """PyTorch's cross-device copy: on the source's current stream, fenced both ways with
        the destination's current stream; it takes bytes / the link's bandwidth."""
        gpus = self.gpus
        src_stream, dst_stream = gpus.current[src.device.index], gpus.current[self.device.index]
        src_stream.t = max(src_stream.t, dst_stream.t)
        src_stream.t += self.values.size / gpus.link_bytes_per_s
        dst_stream.t = max(dst_stream.t, src_stream.t)
        self.values[:] = src.values
        gpus.log.append(("copy", f"{src.device}->{self.device}", src_stream.name, dst_stream.name))


class FakeGpus:
    """``torch`` for two GPUs joined by a full-duplex link of ``link_bytes_per_s`` each way."""

    def __init__(self, link_bytes_per_s: float = 1e9, peer_access: bool = True) -> None:
        self.link_bytes_per_s, self.access, self.log = link_bytes_per_s, peer_access, []
        self.streams: list[FakeStream] = []
        self.current = {i: self._stream(i, f"default{i}") for i in (0, 1)}
        self.synchronized: list[int] = []
        self.cuda = self

    def _stream(self, index: int, name: str) -> FakeStream:
        stream = FakeStream(self, index, name)
        self.streams.append(stream)
        return stream

    # torch
    def device(self, kind: str, index: int) -> FakeDevice:
        return FakeDevice(kind, index)

    def empty_like(self, tensor: FakeTensor, device: FakeDevice) -> FakeTensor:
        return FakeTensor(self, np.zeros_like(tensor.values), device)

    def equal(self, a: FakeTensor, b: FakeTensor) -> bool:
        return bool(np.array_equal(a.values, b.values))

    # torch.cuda
    Event = FakeEvent

    def Stream(self, device: FakeDevice) -> FakeStream:  # noqa: N802 (torch's name)
        return self._stream(device.index, f"stream{len(self.streams)}@gpu{device.index}")

    def can_device_access_peer(self, a: int, b: int) -> bool:
        return self.access

    def synchronize(self, device: Any = None) -> None:
        index = device.index if isinstance(device, FakeDevice) else int(device)
        self.synchronized.append(index)
        latest = max(s.t for s in self.streams)
        for stream in self.streams:      # the whole device waits: all its streams catch up
            if stream.index == index:
                stream.t = latest

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        before = self.current[stream.index]
        self.current[stream.index] = stream
        try:
            yield
        finally:
            self.current[stream.index] = before


class BoundGpu:
    """The bound device of a backend (index 0), as PeerCopy sees it."""

    backend = "cuda"
    index = 0

    def __init__(self, gpus: FakeGpus) -> None:
        self.gpus = gpus
        self.stream = gpus.Stream(FakeDevice("cuda", 0))
        self.stream.name = "bound"

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[FakeStream]:
        with self.gpus.stream(self.stream):
            yield self.stream

    def synchronize(self) -> None:
        self.gpus.synchronize(0)

    def timer_resolution_s(self) -> float:
        return 0.5e-6


def peer_copy(direction: str, nbytes: int = 4 * MIB, **gpus_args: Any) -> tuple[PeerCopy, FakeGpus]:
    gpus = FakeGpus(**gpus_args)
    bound = BoundGpu(gpus)
    data = FakeTensor(gpus, np.arange(nbytes, dtype=np.uint64).astype(np.uint8), FakeDevice("cpu", 0))
    return PeerCopy(bound, gpus, bound.stream, 1, direction, data), gpus


@pytest.mark.parametrize("direction, src, dst", [("to-peer", "cuda:0", "cuda:1"), ("from-peer", "cuda:1", "cuda:0")])
def test_a_one_way_copy_is_timed_on_the_destinations_stream(direction: str, src: str, dst: str) -> None:
    copy, gpus = peer_copy(direction)
    assert copy.backend == "cuda" and copy.timer_resolution_s() == 0.5e-6     # the bound device's
    with copy.on_stream():
        copy.run()
    assert copy.check() == []
    gpus.log.clear()
    gpus.synchronized.clear()
    seconds = copy.time_batch(copy.run, 5)
    assert seconds == pytest.approx(5 * 4 * MIB / 1e9)
    assert sorted(gpus.synchronized[:2]) == [0, 1]          # both GPUs idle before the start event
    destination = copy.routes[0].dst_stream.name
    assert destination == "bound" if direction == "from-peer" else destination.endswith("@gpu1")
    records = [entry for entry in gpus.log if entry[0] == "record"]
    assert [r[1] for r in records] == [destination, destination]
    copies = [entry for entry in gpus.log if entry[0] == "copy"]
    assert len(copies) == 5 and all(c[1] == f"{src}->{dst}" for c in copies)
    assert copy.path == "direct" and copy.bytes_per_direction == 4 * MIB


def test_both_directions_run_together_on_their_own_streams() -> None:
    copy, gpus = peer_copy("bidirectional")
    with copy.on_stream():
        copy.run()
    assert copy.check() == []
    assert copy.routes[1].expected.values[0] == copy.routes[0].expected.values[-1]   # other bytes back
    gpus.log.clear()
    seconds = copy.time_batch(copy.run, 4)
    # a full-duplex link: the two directions overlap, so 4 copies each way take 4 one-way times
    assert seconds == pytest.approx(4 * 4 * MIB / 1e9)
    copies = [entry for entry in gpus.log if entry[0] == "copy"]
    assert [c[1] for c in copies[:2]] == ["cuda:0->cuda:1", "cuda:1->cuda:0"]
    streams_used = {c[2:] for c in copies}
    assert len(streams_used) == 2 and not set(streams_used.pop()) & set(streams_used.pop())
    second = copy.routes[1].dst_stream.name
    start, end = [e[2] for e in gpus.log if e[0] == "record" and e[1] == copy.routes[0].dst_stream.name]
    assert ("wait", second, start) in gpus.log                     # the second direction starts at the start
    joined = [e for e in gpus.log if e[0] == "wait" and e[1] == copy.routes[0].dst_stream.name]
    assert joined and gpus.log.index(joined[-1]) < gpus.log.index(("record", copy.routes[0].dst_stream.name, end))


def test_a_wrong_copy_is_named_and_the_host_path_is_recorded() -> None:
    copy, gpus = peer_copy("bidirectional", nbytes=4096, peer_access=False)
    assert copy.peer_access is False and copy.path == "through-host"
    with copy.on_stream():
        copy.run()
    copy.routes[1].dst.values[7] ^= 0xFF
    (wrong,) = copy.check()
    assert wrong.startswith("cuda:1 -> cuda:0: the copy of 4096 bytes")
    with pytest.raises(UsageError, match="inner must be a positive int"):
        copy.time_batch(copy.run, 0)


def test_a_peer_copy_needs_a_second_gpu() -> None:
    gpus = FakeGpus()
    bound = BoundGpu(gpus)
    data = FakeTensor(gpus, np.zeros(16, dtype=np.uint8), FakeDevice("cpu", 0))
    with pytest.raises(UsageError, match="the peer given is the bound one"):
        PeerCopy(bound, gpus, bound.stream, 0, "to-peer", data)


# ---------------------------------------------------------------- the profile's reading

def peer_case(direction: str, size: int, time_s: float, peer_access: bool = True) -> dict[str, Any]:
    moved = size * (2 if direction == "bidirectional" else 1)
    shape = {"bytes": moved, "bytes_per_direction": size, "kind": "peer", "direction": direction, "device": 0,
             "peer_device": 1, "peer_access": peer_access, "path": "direct" if peer_access else "through-host",
             "pinned": False}
    return case_json(f"test_peer_transfer_gpu[{direction}-{size}-{peer_access}]",
                     {"transfers": {"peer": float(moved)}, "op": "transfer", "shape": shape}, time_s)


def test_the_profile_reports_one_way_and_both_ways_peer_bandwidth() -> None:
    sizes = [4096 * 16**i for i in range(5)]             # 4 KiB .. 256 MiB
    one_way_bw, both_bw, latency = 40e9, 72e9, 8e-6       # the two directions: 1.8x one direction
    cases = [peer_case(d, s, latency + s / one_way_bw) for d in ("to-peer", "from-peer") for s in sizes]
    cases += [peer_case("bidirectional", s, latency + 2 * s / both_bw) for s in sizes]
    cases += [peer_case("to-peer", s, 30e-6 + s / 10e9, peer_access=False) for s in sizes]    # not counted
    profile = build_profile([make_run(cases, kind="gpu")], ["r.json"])
    names = [c["name"] for c in profile["ceilings"]]
    assert "transfer:peer" in names and not any("bidir" in name for name in names)
    peer = next(c for c in profile["ceilings"] if c["name"] == "transfer:peer")
    assert peer["value"] == pytest.approx(one_way_bw, rel=1e-6)
    assert peer["latency_s"] == pytest.approx(latency, rel=1e-3)
    assert peer["bidirectional_bandwidth"] == pytest.approx(both_bw, rel=1e-6)
    assert peer["bidirectional_latency_s"] == pytest.approx(latency, rel=1e-3)
    assert "peer access: direct copies between the GPUs" in peer["caveats"]
    assert any(c.startswith("both directions at once: 72 GB/s in total (1.80x one direction)")
               for c in peer["caveats"])
    assert len(peer["evidence"]["cases"]) == 2 * len(sizes)          # the one-way direct cases only
    curves = profile["curves"]["transfer"]["points"]
    assert len(curves["peer-bidir"]) == len(sizes) and len(curves["peer"]) == 3 * len(sizes)
    # models read the profile: the peer link is the one-way figure
    ceilings = Ceilings.from_profile(profile)
    assert ceilings.link_bandwidth("peer") == pytest.approx(one_way_bw, rel=1e-6)


def test_copies_staged_through_the_host_are_said_to_be() -> None:
    cases = [peer_case("to-peer", s, 30e-6 + s / 10e9, peer_access=False) for s in (MIB, 16 * MIB, 256 * MIB)]
    peer = next(c for c in build_profile([make_run(cases, kind="gpu")], ["r.json"])["ceilings"]
                if c["name"] == "transfer:peer")
    assert peer["value"] == pytest.approx(10e9, rel=1e-6)
    assert "no peer access: the driver staged the copies through host memory" in peer["caveats"]
    assert "bidirectional_bandwidth" not in peer
