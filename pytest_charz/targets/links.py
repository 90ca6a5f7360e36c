"""Datasheet link ceilings of a TargetSpec: bandwidth and latency per transfer kind.

The one place a spec's links become per-kind ceilings (transfer kinds of
:data:`pytest_charz.work.TRANSFER_KINDS`); the models' :class:`~pytest_charz.models.ceilings.Ceilings`
and the capability profile's spec column both read them from here, so a derived figure says the
same thing, with the same source, wherever it appears.
"""
from __future__ import annotations

from dataclasses import dataclass

from .spec import Figure, TargetSpec


@dataclass(frozen=True)
class LinkCeiling:
    """One transfer kind's datasheet figures: bandwidth in bytes per second, latency in seconds
    (None where the spec has no latency figure for it)."""

    bandwidth_bytes_per_s: Figure
    latency_s: Figure | None = None


def link_ceilings(spec: TargetSpec) -> dict[str, LinkCeiling]:
    """The datasheet link ceilings of ``spec`` by transfer kind (kinds it cannot tell are absent).

    ``h2d`` and ``d2h`` are the host link's per-direction bandwidth and latency. Derived figures
    say so in their source: ``d2d`` (and ``host`` on a CPU) copy rate is half the DRAM bandwidth,
    since every copied byte is read once and written once; ``peer`` bandwidth is one peer link's
    per-direction bandwidth times the link count (a transfer to one peer spreads over all links,
    as through an NVSwitch). Kinds come in the order h2d, d2h, d2d, host, peer.
    """
    links: dict[str, LinkCeiling] = {}
    if spec.host_link is not None:
        latency = _us_to_s(spec.host_link.latency_us) if spec.host_link.latency_us is not None else None
        for kind in ("h2d", "d2h"):
            links[kind] = LinkCeiling(spec.host_link.bandwidth_bytes_per_s, latency)
    dram = spec.level("dram")
    if dram is not None and dram.bandwidth_bytes_per_s is not None:
        bandwidth = dram.bandwidth_bytes_per_s
        halved = LinkCeiling(Figure(bandwidth.value / 2, f"half of DRAM bandwidth (read + write): {bandwidth.source}"))
        links["d2d"] = halved
        # Only a CPU's host copies run through the DRAM the spec describes; a GPU's host memory
        # is the host's, not in its spec.
        if spec.identity.kind == "cpu":
            links["host"] = halved
    if spec.peer_links:
        peer = spec.peer_links[0]
        links["peer"] = LinkCeiling(
            Figure(peer.bandwidth_bytes_per_s.value * peer.count,
                   f"{peer.count} x {peer.name} per direction: {peer.bandwidth_bytes_per_s.source}"),
            _us_to_s(peer.latency_us) if peer.latency_us is not None else None)
    return links


def _us_to_s(figure: Figure) -> Figure:
    return Figure(figure.value * 1e-6, figure.source)
