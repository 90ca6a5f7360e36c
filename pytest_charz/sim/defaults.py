"""Figures the simulator needs that the catalogue's datasheets do not give, each with its source.

A capability profile replaces the runtime figures with measured ones (``launch``, the links'
``transfer:*`` latency); what-if parameters (:mod:`.parameters`) replace any of them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..workloads import runtime

#: Host time per op of an eager framework, and the device-side gap of one stream launch, where
#: nothing was measured: the figures of the one runtime rule (:mod:`pytest_charz.workloads.runtime`),
#: which a machine's prediction core sets (:meth:`.machine.Machine.priced_by`).
HOST_DISPATCH_S = runtime.DEFAULT_HOST_DISPATCH_S
HOST_DISPATCH_SOURCE = runtime.DEFAULT_DISPATCH_SOURCE
LAUNCH_OVERHEAD_S = runtime.DEFAULT_LAUNCH_OVERHEAD_S
LAUNCH_OVERHEAD_SOURCE = runtime.DEFAULT_LAUNCH_SOURCE
#: Device-side gap of one kernel node of a replayed graph: the runtime's figure and its source
#: (:data:`pytest_charz.workloads.runtime.GRAPH_NODE_LAUNCH_S`), the same for predict_graph.
GRAPH_NODE_LAUNCH_S = runtime.GRAPH_NODE_LAUNCH_S
GRAPH_NODE_LAUNCH_SOURCE = ("0.5 us: 3.4 us per graph kernel - 2.9 us of kernel in 'Getting Started with CUDA Graphs', "
                            "A. Gray, NVIDIA Technical Blog, 2019, https://developer.nvidia.com/blog/cuda-graphs/")
#: Launches a stream holds before the host blocks, and the copy engines: the runtime's figures
#: (cited in :mod:`pytest_charz.workloads.runtime`), the same for predict_graph.
LAUNCH_QUEUE_DEPTH = runtime.LAUNCH_QUEUE_DEPTH
COPY_ENGINES = runtime.COPY_ENGINES
COPY_ENGINES_SOURCE = "CUDA C++ Programming Guide, NVIDIA: asyncEngineCount 2 overlaps copies in both directions"
#: Per-hop latencies where the spec has none. "NVLink, NVSwitch, and GPU Interconnect" (Fridays
#: with Faraday, GPU Hardware series part 3, 2025,
#: https://fridayswithfaraday.com/posts/gpu-hw-nvlink-nvswitch-interconnect), table "GPU
#: Interconnect Bandwidth Hierarchy (H100 DGX System)": NVLink 4 ~1-2 us, PCIe Gen5 ~2-5 us.
PEER_LINK_LATENCY_S = 1.5e-6
HOST_LINK_LATENCY_S = 3.5e-6
LINK_LATENCY_SOURCE = ("middle of the ranges in 'NVLink, NVSwitch, and GPU Interconnect', Fridays with Faraday, 2025, "
                       "https://fridayswithfaraday.com/posts/gpu-hw-nvlink-nvswitch-interconnect (table 'GPU "
                       "Interconnect Bandwidth Hierarchy': NVLink 4 ~1-2 us, PCIe Gen5 ~2-5 us)")

TOPOLOGIES = ("switch", "mesh", "pair", "torus", "none")


@dataclass(frozen=True)
class PeerTopology:
    """How a product's devices connect: ``topology`` and the ``devices`` of one system."""

    topology: str
    devices: int
    source: str


#: By peer link name (the catalogue's ``peer_links[0].name``).
PEER_TOPOLOGIES: dict[str, PeerTopology] = {
    "nvlink3": PeerTopology("switch", 8, "HGX A100 8-GPU: every GPU's 12 NVLink 3 links go to NVSwitches "
                            "(NVIDIA A100 Tensor Core GPU Architecture whitepaper, NVIDIA, 2020)"),
    "nvlink4": PeerTopology("switch", 8, "HGX H100/H200 8-GPU: 18 NVLink 4 links per GPU to four NVSwitches "
                            "(NVIDIA H100 Tensor Core GPU Architecture whitepaper, NVIDIA, 2022)"),
    "nvlink4-bridge": PeerTopology("pair", 2, "NVLink bridge joins a pair of H100 PCIe cards (H100 datasheet)"),
    "infinity-fabric": PeerTopology("mesh", 8, "MI300X platform: 8 GPUs fully connected by each GPU's 7 Infinity "
                                    "Fabric links (AMD Instinct MI300X specifications, AMD, 2023)"),
    "infinity-fabric-gcd": PeerTopology("mesh", 8, "MI250X: 8 GCDs on 4 OAMs joined by Infinity Fabric links "
                                        "(AMD Instinct MI200 series documentation, ROCm)"),
    "ici": PeerTopology("torus", 8, "TPU v5e: 2D torus ICI, 4 ports per chip; a v5litepod-8 slice has 8 chips "
                        "(Cloud TPU v5e documentation, Google)"),
}
NO_PEERS = PeerTopology("none", 1, "no peer links in the spec: one device")
