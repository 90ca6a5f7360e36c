"""Collectives: all-reduce, all-gather, reduce-scatter, all-to-all, broadcast and send/recv over
message sizes from 16 B to 256 MiB (64 MiB on CPUs), across ranks this suite starts itself.

The pytest process is rank 0; ``pytest_charz.distributed.Ranks`` starts the other ranks as
subprocesses (rendezvous through a TCPStore on 127.0.0.1, a port the OS picks) once for the
module. CPU targets: ``CPU_RANKS`` Gloo ranks (two processes on the host, loopback TCP). GPU
targets: one rank per visible GPU with NCCL (RCCL on ROCm builds), rank 0 on the bound GPU.
(Written for GPUs but run only on CPUs so far.)

Under ``torchrun`` (or any launcher that sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``) the ranks are the launcher's, on one node or several: every rank runs this
module, rank 0 leads and records the cases, every other rank follows rank 0's commands for the
whole module (its cases then skip, saying so) and drives the GPU of its ``LOCAL_RANK``.

Each case prepares fresh random inputs from its seed on every rank (non-zero integers as
float32, so sums are exact), runs the collective once and checks every rank's output against its
reference, then measures rank 0's calls with the usual sampler while the peers run the same
calls in lock-step (``pytest_charz.distributed.lockstep``: before each batch the sampler times,
rank 0 tells the peers how many calls, outside the timed region). A rank that dies or hangs ends
the case with RankFailure within its deadline; the ranks are torn down and the next case starts
fresh ones.

Sizes are nccl-tests' ``bytes`` (``pytest_charz.distributed.buffers``); ``work.shape`` carries the
bus factor, so algorithm bandwidth (bytes / time) and bus bandwidth (times the factor: 2(n-1)/n
all-reduce, (n-1)/n all-gather, reduce-scatter and all-to-all, 1 broadcast and send/recv) follow
from each case; the profile reads ``collective:<op>`` from them.

On CPUs the sweep and the noise target follow what Gloo ranks sharing the host's cores do: the
ranks time-share the cores with each other and with the pytest process, so single calls of a
small message spread over 2-5x (scheduler time slices; on a 2-vCPU Zen 3 guest the 1 s cases
ended at +-4% to +-50% after 100-350 calls, none within 2%). The sweep keeps seven sizes, 16 B to
64 MiB (the quick run's five and 16, 64 MiB: enough for the alpha-beta fit, whose latency comes
from the small messages and bandwidth from the largest), and each case asks for
a +-5% CI of its median, judged against a 10% drift threshold (twice the noise target, so a case
that meets it is decidable). GPU sweeps keep x4 steps, a 2% target and the default threshold.
"""
from __future__ import annotations

from typing import Any, Iterator

import pytest

from _sizes import KIB, MIB, format_bytes_id, not_this_backend, plan_for
from pytest_charz import Work

OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "p2p")
START_BYTES = 16
MAX_BYTES = 256 * MIB
QUICK_SIZES = (16, KIB, 64 * KIB, MIB, 4 * MIB)
CPU_RANKS = 2
MAX_TIME_S = 1.0
LARGE_MAX_TIME_S = 3.0          # from LARGE_BYTES up: a Gloo call of 64 MiB takes tens of ms
LARGE_BYTES = 64 * MIB
DEADLINE_GRACE_S = 30.0         # checks and allocation of the largest messages, on top of 3x the budget
DATA_TIMEOUT_S = 60.0
#: CPU (Gloo) sweep: the quick sizes and two bandwidth-bound ones, up to CPU_MAX_BYTES.
CPU_MAX_BYTES = 64 * MIB
CPU_SIZES = (*QUICK_SIZES, 16 * MIB, CPU_MAX_BYTES)
#: CPU budgets: small messages, and from CPU_LARGE_BYTES (16 MiB: 10-40 ms a call) up.
CPU_MAX_TIME_S = 0.5
CPU_LARGE_BYTES = 16 * MIB
CPU_LARGE_MAX_TIME_S = 1.0
CPU_LARGEST_MAX_TIME_S = 1.5
#: CPU noise target and drift threshold (see the module docstring): the threshold is twice the target.
CPU_NOISE = 0.05
CPU_THRESHOLD = 0.10


def message_sizes(cap_bytes: int) -> list[int]:
    """16 B, 64 B, ... (x4) up to 256 MiB or ``cap_bytes``."""
    sizes, size = [], START_BYTES
    while size <= min(MAX_BYTES, cap_bytes):
        sizes.append(size)
        size *= 4
    return sizes


def cpu_message_sizes(cap_bytes: int) -> list[int]:
    """The CPU sweep, ``CPU_SIZES``, up to ``cap_bytes``."""
    return [size for size in CPU_SIZES if size <= cap_bytes]


def cpu_case_marks(size: int) -> list[Any]:
    """Budget, noise target and drift threshold of a CPU (Gloo) collective of ``size`` bytes."""
    budget = (CPU_LARGEST_MAX_TIME_S if size >= CPU_MAX_BYTES else
              CPU_LARGE_MAX_TIME_S if size >= CPU_LARGE_BYTES else CPU_MAX_TIME_S)
    return [pytest.mark.charz(max_time=budget, noise=CPU_NOISE, threshold=CPU_THRESHOLD)]


def cpu_rank_count() -> int:
    return CPU_RANKS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "collective_case" not in metafunc.fixturenames:
        return
    plan = plan_for(metafunc.config)
    if plan.backend not in ("cpu", "cuda", "rocm"):
        metafunc.parametrize("collective_case", not_this_backend(f"collectives; the bound device is {plan.backend}"))
        return
    # Each rank holds about two buffers of the message (rank 0 also builds a reference).
    ranks = CPU_RANKS if plan.backend == "cpu" else 8
    cap = plan.cap_bytes // ranks if plan.backend == "cpu" else plan.cap_bytes
    on_cpu = plan.backend == "cpu"
    sizes = cpu_message_sizes(cap) if on_cpu else message_sizes(cap)
    cases = []
    for op in OPS:
        for size in sizes:
            marks: list[Any] = [] if size in QUICK_SIZES else [pytest.mark.charz_slow]
            if on_cpu:
                marks += cpu_case_marks(size)
            else:
                marks.append(pytest.mark.charz(max_time=LARGE_MAX_TIME_S if size >= LARGE_BYTES else MAX_TIME_S))
            cases.append(pytest.param((op, size), id=f"{op}-{format_bytes_id(size)}", marks=marks))
    metafunc.parametrize("collective_case", cases)


def rank_plan(device: Any, launched: Any = None) -> tuple[int, str, list[int] | None]:
    """(ranks, backend, GPU index per rank or None) for the bound device; skips the module's
    cases where collectives cannot run (no torch.distributed, no backend, one CPU or GPU).
    ``launched``: this process's ``LaunchedRank`` under a launcher, whose world it is."""
    torch = pytest.importorskip("torch", reason="collectives run on torch.distributed")
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("this PyTorch build has no torch.distributed")
    if dist.is_initialized():
        pytest.skip("a default process group exists already: the suite needs a fresh one for its ranks")
    if launched is not None:
        return launched_plan(device, launched, dist)
    if device.backend == "cpu":
        from pytest_charz.kernels.cpu import available_threads

        if not dist.is_gloo_available():
            pytest.skip("this PyTorch build has no Gloo backend")
        if available_threads() < CPU_RANKS:
            pytest.skip(f"this process may run on {available_threads()} CPU(s): {CPU_RANKS} ranks would time-share it")
        return CPU_RANKS, "gloo", None
    if not (torch.cuda.is_available() and dist.is_nccl_available()):
        pytest.skip("no NCCL/RCCL in this PyTorch build, or no GPU visible to it")
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(f"{count} GPU visible: collectives need two ranks, one per GPU")
    index = int(getattr(device, "index", 0) or 0)
    return count, "nccl", [index] + [i for i in range(count) if i != index]


def launched_plan(device: Any, launched: Any, dist: Any) -> tuple[int, str, list[int] | None]:
    """:func:`rank_plan` under a launcher: its world, Gloo on CPUs, NCCL/RCCL on GPUs with rank 0
    on the bound GPU (only rank 0's index is given: the other ranks drive their ``LOCAL_RANK``'s)."""
    if launched.world < 2:
        pytest.skip(f"the launcher started {launched.world} rank: collectives need two or more "
                    "(torchrun --nproc-per-node=2, or several nodes)")
    if device.backend == "cpu":
        if not dist.is_gloo_available():
            pytest.skip("this PyTorch build has no Gloo backend")
        return launched.world, "gloo", None
    if not dist.is_nccl_available():
        pytest.skip("no NCCL/RCCL in this PyTorch build")
    return launched.world, "nccl", [int(getattr(device, "index", 0) or 0)]   # rank 0's; each peer picks its own


class RankPool:
    """The module's ranks: started at first use, started afresh after a case tore them down
    (a launcher's ranks are joined once: once torn down, the job has to be run again)."""

    def __init__(self, world: int, backend: str, indices: list[int] | None, launched: Any = None) -> None:
        self.world, self.backend, self.indices, self.launched = world, backend, indices, launched
        self._ranks: Any = None

    def get(self) -> Any:
        from pytest_charz.distributed import RankFailure, Ranks

        if self._ranks is not None and self._ranks.broken is not None and self.launched is not None:
            raise RankFailure(f"the launcher's ranks were torn down ({self._ranks.broken}); they cannot be "
                              "started afresh: run the job again")
        if self._ranks is None or self._ranks.broken is not None:
            if self._ranks is not None:
                self._ranks.close()
            self._ranks = Ranks(self.world, self.backend, self.indices, timeout_s=DATA_TIMEOUT_S,
                                launched=self.launched).start()
        return self._ranks

    def close(self) -> None:
        if self._ranks is not None:
            self._ranks.close()


@pytest.fixture(scope="module")
def rank_pool(device: Any) -> Iterator[RankPool]:
    from pytest_charz.distributed import follow_launched, launched_rank

    launched = launched_rank()
    world, backend, indices = rank_plan(device, launched)
    if launched is not None and launched.rank != 0:
        # A launcher's peer: rank 0's cases run here as its commands say, for the whole module.
        served = follow_launched(launched, backend, launched.local_rank if backend == "nccl" else None,
                                 timeout_s=DATA_TIMEOUT_S)
        pytest.skip(f"rank {launched.rank} of {launched.world}: this rank ran rank 0's collectives with it "
                    f"({served} commands); rank 0 measures and records the cases")
    pool = RankPool(world, backend, indices, launched)
    yield pool
    pool.close()


@pytest.mark.charz(noise=0.02, quick={"max_time": 0.05})
def test_collective(charz: Any, request: pytest.FixtureRequest, rank_pool: RankPool,
                    collective_case: tuple[str, int]) -> None:
    from pytest_charz.distributed import following
    from pytest_charz.markers import marker_settings
    from pytest_charz.models.comm import bus_factor
    from pytest_charz.session import session_for
    from pytest_charz.work import Collective

    op, size = collective_case
    ranks = rank_pool.get()
    buffers = ranks.prepare(op, size, seed=int(charz.rng.integers(1, 2**62)))
    mismatches = ranks.check(buffers)
    assert not mismatches, "\n".join(mismatches)
    n = ranks.world
    case_shape: dict[str, Any] = {"collective": op, "bytes": buffers.nbytes, "ranks": n, "backend": rank_pool.backend,
                                  "dtype": "fp32", "bus_factor": bus_factor(op, n)}
    work = Work(collectives=(Collective(op, float(buffers.nbytes), n),), op="collective", shape=case_shape)
    from pytest_charz.measure.sampler import OverBudget

    settings = marker_settings(request.node, session_for(request.config).base_settings(), charz.quick)
    over_budget: OverBudget | None = None
    with following(charz, ranks, buffers, deadline_s=3 * settings.max_time_s + DEADLINE_GRACE_S) as lockstep:
        try:
            charz.measure(buffers.run, work=work, device=lockstep)
        except OverBudget as exc:       # the peers ran that call too: collect them before skipping
            over_budget = exc
    if over_budget is not None:
        pytest.skip(f"{over_budget} ({n} {rank_pool.backend} ranks)")
