"""Binding a target to the devices that are really visible."""
from __future__ import annotations

import pytest

from pytest_charz.devices.base import VisibleDevice
from pytest_charz.devices.detect import select_target
from pytest_charz.errors import UsageError

CPU = VisibleDevice("cpu", 0, "Some CPU")
H100S = [VisibleDevice("cuda", i, "NVIDIA H100 80GB HBM3") for i in range(4)]


def test_xdist_workers_spread_over_the_matching_devices() -> None:
    visible = [CPU, *H100S]
    picked = [select_target("h100", visible, worker)[1].index for worker in range(6)]
    assert picked == [0, 1, 2, 3, 0, 1]
    spec, device = select_target(None, visible, 2)         # the default target too
    assert spec.id == "h100-sxm" and device.index == 2


def test_a_target_that_is_not_among_the_visible_devices_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"'h200'.*not visible.*cuda:0 \(NVIDIA H100 80GB HBM3\)"):
        select_target("h200", [CPU, *H100S])


def test_without_an_accelerator_the_default_is_the_host_cpu() -> None:
    spec, device = select_target(None, [CPU])
    assert spec.id == "cpu" and device is CPU


# -- the backend registry ---------------------------------------------------------------------

class RecordingBackend:
    """A backend that opens a stand-in device and records what it was asked to open."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.opened: list[tuple[VisibleDevice, object]] = []

    def select(self, name: str, worker: int | None) -> tuple[object, VisibleDevice]:
        from pytest_charz.targets.catalogue import resolve

        return resolve("h100"), VisibleDevice(self.name, worker or 0, f"{self.name} {name}")

    def open(self, visible: VisibleDevice, spec: object) -> object:
        self.opened.append((visible, spec))
        from pytest_charz.devices.cpu import CpuDevice

        return CpuDevice(visible.index)


def registry_of(*backends: object):
    from pytest_charz.devices.registry import BackendRegistry

    return BackendRegistry(tuple(backends))  # type: ignore[arg-type]


def test_a_name_without_prefix_is_opened_by_the_backend_of_the_device_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_charz.devices import detect, registry

    monkeypatch.setattr(detect, "visible_devices", lambda: [CPU, *H100S])
    cuda = RecordingBackend("cuda")
    spec, visible, device = registry.bind("h100", 3, registry_of(RecordingBackend("cpu"), cuda))
    assert spec.id == "h100-sxm" and visible == H100S[3]
    assert cuda.opened == [(H100S[3], spec)]
    device.close()


def test_a_prefix_routes_the_rest_of_the_name_to_its_backend() -> None:
    from pytest_charz.devices import registry

    toy = RecordingBackend("toy")
    spec, visible, device = registry.bind("toy:chip-7", 1, registry_of(toy))
    assert visible == VisibleDevice("toy", 1, "toy chip-7") and toy.opened == [(visible, spec)]
    device.close()


def test_a_device_type_with_no_backend_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_charz.devices import detect, registry

    monkeypatch.setattr(detect, "visible_devices", lambda: [CPU, *H100S])
    with pytest.raises(UsageError, match=r"no backend drives 'cuda' devices; known backends: cpu, toy"):
        registry.bind("h100", None, registry_of(RecordingBackend("cpu"), RecordingBackend("toy")))


def test_a_built_in_backend_checks_that_the_target_is_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_charz.devices import detect, registry

    monkeypatch.setattr(detect, "visible_devices", lambda: [CPU, *H100S])
    backends = registry_of(*registry.builtin_backends())
    with pytest.raises(UsageError, match=r"'h100'.*driven by the 'cuda' backend, not 'rocm'.*--target=cuda:h100"):
        backends.get("rocm").select("h100", None)
    spec, visible = backends.get("cuda").select("", 2)          # cuda: the first catalogued CUDA kind
    assert spec.id == "h100-sxm" and visible == H100S[2]
    with pytest.raises(UsageError, match=r"no rocm device .* is visible"):
        backends.get("rocm").select("", None)
    spec, visible = backends.get("cpu").select("", None)
    assert spec.id == "cpu" and visible is CPU


@pytest.mark.parametrize("bad, message", [
    (RecordingBackend("has:colon"), "non-empty string without ':'"),
    (RecordingBackend(""), "non-empty string without ':'"),
    (type("NoOpen", (), {"name": "x", "select": lambda self, n, w: None})(), "lacks open"),
])
def test_what_is_not_a_backend_cannot_register(bad: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        registry_of(bad)


def test_a_backend_whose_select_or_open_breaks_the_protocol_is_named() -> None:
    from pytest_charz.devices import registry

    class Careless(RecordingBackend):
        def open(self, visible: VisibleDevice, spec: object) -> object:
            return object()

    with pytest.raises(UsageError, match=r"backend 'careless': open\(\) returned .* lacks info, backend"):
        registry.bind("careless:x", None, registry_of(Careless("careless")))

    class Vague(RecordingBackend):
        def select(self, name: str, worker: int | None) -> tuple[object, VisibleDevice]:
            return ("h100", VisibleDevice("vague", 0, "v"))

    with pytest.raises(UsageError, match=r"backend 'vague': select\(\) must return \(TargetSpec, VisibleDevice\)"):
        registry.bind("vague:x", None, registry_of(Vague("vague")))
