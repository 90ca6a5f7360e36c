"""Measured energy of a case: RAPL on CPUs, NVML on NVIDIA GPUs, amdsmi on AMD GPUs.

An :class:`EnergySource` reads a cumulative energy counter in joules (:meth:`EnergySource.read_j`,
cheap enough to call around the sampler's batches); :func:`unavailable_reason` and the sources'
constructors say why a source is absent (no ``/sys/class/powercap``, ``energy_uj`` readable by
root only, NVML without the total-energy query on this board, amdsmi missing). A case's energy is
an :class:`~pytest_charz.measure.readings.EnergyReading` (with the other sensor readings, below the
run file's records that hold it): joules over the timed samples, the calls they made, joules per
call; :func:`reading_notes` says how far it can be trusted.

RAPL: every top-level package domain ``/sys/class/powercap/intel-rapl:<n>`` (the name also on
AMD CPUs; sub-domains ``intel-rapl:<n>:<m>`` are inside their package and are not added again),
``energy_uj`` in microjoules, wrapping at ``max_energy_range_uj``.
NVML: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta and newer).
amdsmi: ``amdsmi_get_energy_count`` (accumulator x ``counter_resolution`` uJ).
"""
from __future__ import annotations

import glob
import os
import re
from typing import Any, Callable, Protocol, runtime_checkable

POWERCAP_DIR = "/sys/class/powercap"
#: An interval shorter than this gives a rough figure: RAPL updates about every millisecond and
#: GPU energy counters more slowly, so a few updates' rounding is a visible share of the total.
SHORT_INTERVAL_S = 0.1


@runtime_checkable
class EnergySource(Protocol):
    """A cumulative energy counter. Implementations: :class:`RaplEnergy`, :class:`NvmlEnergy`,
    :class:`AmdsmiEnergy`."""

    name: str

    def read_j(self) -> float:
        """Joules since an arbitrary origin, monotonic (wrap-around already undone)."""
        ...

    def close(self) -> None: ...


class EnergyUnavailable(Exception):
    """A source cannot measure here; the message is the reason recorded in the run file."""


# -- RAPL ----------------------------------------------------------------------------------------
_PACKAGE = re.compile(r"^intel-rapl:\d+$")


def rapl_domains(root: str = POWERCAP_DIR) -> list[str]:
    """The top-level RAPL package domains under ``root`` (sorted)."""
    return sorted(path for path in glob.glob(os.path.join(root, "intel-rapl:*"))
                  if _PACKAGE.match(os.path.basename(path)))


def unwrap_uj(previous_uj: int, current_uj: int, max_range_uj: int) -> int:
    """The energy between two ``energy_uj`` readings, undoing one wrap at ``max_energy_range_uj``."""
    delta = current_uj - previous_uj
    if delta < 0:
        delta += max_range_uj + 1 if max_range_uj > 0 else 0
    return max(delta, 0)


class RaplEnergy:
    """The sum of the RAPL package domains of the host (``/sys/class/powercap``)."""

    name = "rapl"

    def __init__(self, root: str = POWERCAP_DIR) -> None:
        if not os.path.isdir(root):
            raise EnergyUnavailable(f"no RAPL: {root} does not exist (no powercap driver, or a virtual machine "
                                    "that does not expose the energy counters)")
        domains = rapl_domains(root)
        if not domains:
            raise EnergyUnavailable(f"no RAPL: {root} has no intel-rapl:<n> package domain")
        self._files: list[Any] = []
        self._ranges: list[int] = []
        try:
            for domain in domains:
                with open(os.path.join(domain, "max_energy_range_uj")) as handle:
                    self._ranges.append(int(handle.read().strip()))
                self._files.append(open(os.path.join(domain, "energy_uj"), "rb", buffering=0))
        except PermissionError:
            self.close()
            raise EnergyUnavailable(f"no permission: {domains[0]}/energy_uj is readable by root only (since "
                                    "Linux 5.10, against the PLATYPUS power side channel)") from None
        except (OSError, ValueError) as exc:
            self.close()
            raise EnergyUnavailable(f"RAPL unreadable: {exc}") from None
        self.domains = [os.path.basename(d) for d in domains]
        self._last = self._raw()
        self._total_uj = 0

    def _raw(self) -> list[int]:
        values = []
        for handle in self._files:
            values.append(int(os.pread(handle.fileno(), 32, 0).strip()))
        return values

    def read_j(self) -> float:
        now = self._raw()
        for i, (before, after) in enumerate(zip(self._last, now)):
            self._total_uj += unwrap_uj(before, after, self._ranges[i])
        self._last = now
        return self._total_uj * 1e-6

    def close(self) -> None:
        for handle in getattr(self, "_files", []):
            handle.close()
        self._files = []


# -- GPUs ----------------------------------------------------------------------------------------
class _TelemetryEnergy:
    """An energy source over a telemetry object with ``energy_j()`` (NVML or amdsmi)."""

    name = ""

    def __init__(self, telemetry: Any) -> None:
        self._telemetry = telemetry
        first = telemetry.energy_j()
        if first is None:
            why = getattr(telemetry, "unreadable", {})
            detail = "; ".join(f"{k}: {v}" for k, v in why.items()) or "no value"
            telemetry.close()
            raise EnergyUnavailable(f"{self.name}: the energy counter cannot be read on this device ({detail})")

    def read_j(self) -> float:
        value = self._telemetry.energy_j()
        if value is None:
            raise EnergyUnavailable(f"{self.name}: the energy counter stopped answering")
        return float(value)

    def close(self) -> None:
        self._telemetry.close()


class NvmlEnergy(_TelemetryEnergy):
    """``nvmlDeviceGetTotalEnergyConsumption`` of one NVIDIA GPU."""

    name = "nvml"


class AmdsmiEnergy(_TelemetryEnergy):
    """``amdsmi_get_energy_count`` of one AMD GPU."""

    name = "amdsmi"


def _gpu_source(kind: str, pci_bus_id: str | None) -> EnergySource:
    from ..errors import MissingExtraError

    try:
        if kind == "cuda":
            from ..devices.nvml import NvmlTelemetry

            return NvmlEnergy(NvmlTelemetry(pci_bus_id=pci_bus_id) if pci_bus_id else NvmlTelemetry(0))
        from ..devices.amdsmi_telemetry import AmdsmiTelemetry

        return AmdsmiEnergy(AmdsmiTelemetry(pci_bus_id=pci_bus_id) if pci_bus_id else AmdsmiTelemetry(0))
    except MissingExtraError as exc:
        raise EnergyUnavailable(str(exc)) from None
    except EnergyUnavailable:
        raise
    except Exception as exc:  # the vendor library's own error types: NVMLError, AmdSmiException
        raise EnergyUnavailable(f"{kind} energy: {type(exc).__name__}: {exc}") from None


#: Backend name -> how to open its energy source (``pci_bus_id`` of the bound device or None).
OPENERS: dict[str, Callable[[str | None], EnergySource]] = {
    "cpu": lambda _pci: RaplEnergy(),
    "cuda": lambda pci: _gpu_source("cuda", pci),
    "rocm": lambda pci: _gpu_source("rocm", pci),
}
SOURCE_NAMES = {"cpu": "rapl", "cuda": "nvml", "rocm": "amdsmi"}


def open_energy(backend: str, pci_bus_id: str | None = None) -> tuple[EnergySource | None, str]:
    """The energy source of a device of ``backend`` and its name, or (None, the reason)."""
    opener = OPENERS.get(backend)
    if opener is None:
        return None, f"no energy counter for backend {backend!r} (known: {', '.join(sorted(OPENERS))})"
    try:
        return opener(pci_bus_id), SOURCE_NAMES[backend]
    except EnergyUnavailable as exc:
        return None, str(exc)


def reading_notes(interval_s: float | None, discarded: int) -> tuple[str, ...]:
    notes: list[str] = []
    if interval_s is not None and interval_s < SHORT_INTERVAL_S:
        notes.append(f"short interval ({interval_s * 1e3:.3g} ms): the counter's update period makes this rough")
    if discarded:
        notes.append(f"includes {discarded} discarded sample(s); the pauses after them are not included")
    return tuple(notes)
