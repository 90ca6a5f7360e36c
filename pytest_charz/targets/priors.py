"""Spec-only priors: the figures a datasheet lacks, so that a target predicts every kind of Work.

A datasheet gives peaks and per-direction link rates, but no launch overhead, no link or memory
latencies, and no fraction of those peaks that real code reaches. ``[priors]`` of a catalogue file
(:class:`~pytest_charz.targets.spec.Priors`) holds them, each with its citation; this module turns
them into the figure maps of :class:`~pytest_charz.models.ceilings.Ceilings`:

* ``efficiency.gemm_<dtype>`` scales the dense matrix peak of that dtype (the GEMM a vendor
  library reaches at its best shape); the datasheet figure stays the vector peak of that dtype
  where the spec has no vector figure of its own, so elementwise ops are not derated by a GEMM's
  fraction. ``efficiency.dram`` scales the DRAM bandwidth (and the ``d2d``/``host`` copy rates
  derived from it); ``efficiency.host_link`` / ``efficiency.peer_link`` the link rates.
* ``latency_ns`` and ``bandwidth_bytes_per_s`` fill memory levels the spec has no figure for;
  ``host_link_*`` and ``peer_link_*`` fill links the spec lacks (a TPU's host link, a PCIe card's
  peer path) or their latencies; a ``d2d`` copy costs one launch (``launch_us``) of latency.
* ``launch_us`` is the launch (dispatch) overhead of one kernel (one op's dispatch on a CPU).
* ``gemm_tile_us.<dtype>`` is the fixed time one output tile of the vendor GEMM pays besides its
  main loop (``Ceilings.gemm_tile_s``, read by ``models/gemm.py``); only with all priors, since
  it adds time and the datasheet roofline is a lower bound.
* On a CPU, a DRAM bandwidth prior also gives host-memory copies (``host``) half of it.

Every figure made here has a source starting with :data:`PRIOR_MARK`, naming the prior's citation
key and, for a scaled figure, the datasheet figure it scaled; ``Ceilings.priors_used(work)`` lists
the ones a prediction of that work consulted.
"""
from __future__ import annotations

from typing import MutableMapping

from .spec import Figure, TargetSpec

PRIOR_MARK = "prior: "

FigureMap = MutableMapping[str, Figure]


def is_prior(figure: Figure | None) -> bool:
    """Whether ``figure`` came from a prior rather than a datasheet or a measurement."""
    return figure is not None and figure.source.startswith(PRIOR_MARK)


def _scaled(figure: Figure, efficiency: Figure, what: str) -> Figure:
    return Figure(figure.value * efficiency.value,
                  f"{PRIOR_MARK}{efficiency.value:.1%} {what} ({efficiency.source}) x datasheet "
                  f"{figure.value:.4g} ({figure.source})")


def _filled(figure: Figure, scale: float, unit: str) -> Figure:
    return Figure(figure.value * scale, f"{PRIOR_MARK}{figure.value:g} {unit} ({figure.source})")


PRIOR_MODES = ("all", "missing", "none")


def apply_priors(spec: TargetSpec, peak_flops: FigureMap, vector_peak_flops: FigureMap,
                 bandwidth: FigureMap, latency_s: FigureMap, link_bandwidth: FigureMap,
                 link_latency_s: FigureMap, mode: str = "all", gemm_tile_s: FigureMap | None = None) -> Figure | None:
    """Put ``spec.priors`` into the datasheet figure maps (updated in place, keyed as in
    ``Ceilings``); returns the launch overhead prior in seconds (None when the spec has none).

    ``mode``: ``"all"``; ``"missing"`` fills only figures the datasheet lacks and leaves the
    datasheet's own figures unscaled (the datasheet roofline, a lower bound on time: no GEMM
    per-tile time either, which only adds time); ``"none"``.
    """
    priors = spec.priors
    if priors is None or mode == "none":
        return None
    eff = priors.efficiency if mode == "all" else {}
    if mode == "all" and gemm_tile_s is not None:
        for dtype, figure in priors.gemm_tile_us.items():
            gemm_tile_s[dtype] = _filled(figure, 1e-6, "us")
    for dtype, datasheet in list(peak_flops.items()):
        fraction = eff.get(f"gemm_{dtype}")
        if fraction is not None:
            vector_peak_flops.setdefault(dtype, datasheet)
            peak_flops[dtype] = _scaled(datasheet, fraction, "achievable GEMM fraction")
    for level, figure in priors.bandwidth_bytes_per_s.items():
        bandwidth.setdefault(level, _filled(figure, 1.0, "B/s"))
    if "dram" in bandwidth and "dram" in eff and not bandwidth["dram"].source.startswith(PRIOR_MARK):
        bandwidth["dram"] = _scaled(bandwidth["dram"], eff["dram"], "achievable DRAM bandwidth fraction")
    if "dram" in bandwidth:
        if spec.identity.kind == "cpu":
            link_bandwidth.setdefault("host", bandwidth["dram"])   # replaced just below
        for kind in ("d2d", "host"):
            if kind in link_bandwidth:
                dram = bandwidth["dram"]
                link_bandwidth[kind] = Figure(dram.value / 2, f"{PRIOR_MARK}half of DRAM bandwidth "
                                                              f"(read + write) of {dram.source}")
    for level, figure in priors.latency_ns.items():
        latency_s.setdefault(level, _filled(figure, 1e-9, "ns"))
    _link(priors.host_link_bandwidth_bytes_per_s, priors.host_link_latency_us, eff.get("host_link"),
          ("h2d", "d2h"), link_bandwidth, link_latency_s)
    _link(priors.peer_link_bandwidth_bytes_per_s, priors.peer_link_latency_us, eff.get("peer_link"),
          ("peer",), link_bandwidth, link_latency_s)
    launch = _filled(priors.launch_us, 1e-6, "us") if priors.launch_us is not None else None
    if launch is not None:
        for kind in ("d2d",):   # a device copy is one launch; a host memcpy is not
            if kind in link_bandwidth and kind not in link_latency_s:
                link_latency_s[kind] = Figure(launch.value, f"{PRIOR_MARK}one launch per copy "
                                                            f"({priors.launch_us.source if priors.launch_us else ''})")
    return launch


def _link(bandwidth: Figure | None, latency_us: Figure | None, fraction: Figure | None,
          kinds: tuple[str, ...], link_bandwidth: FigureMap, link_latency_s: FigureMap) -> None:
    for kind in kinds:
        if kind not in link_bandwidth and bandwidth is not None:
            link_bandwidth[kind] = _filled(bandwidth, 1.0, "B/s per direction")
        if kind in link_bandwidth and fraction is not None and not link_bandwidth[kind].source.startswith(PRIOR_MARK):
            link_bandwidth[kind] = _scaled(link_bandwidth[kind], fraction, "achievable link fraction")
        if kind in link_bandwidth and kind not in link_latency_s and latency_us is not None:
            link_latency_s[kind] = _filled(latency_us, 1e-6, "us")
