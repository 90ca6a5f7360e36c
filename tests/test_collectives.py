"""The collectives suite's machinery without timing anything: nccl-tests' bus factors, the
buffers' references, the profile's ``collective:<op>`` reading and the model that uses it, the
peers following the sampler's batches, and a real two-rank Gloo group (right sums; a peer that
dies or hangs ends the step with a clear error and leaves no process behind). Nothing here
asserts on a measured speed."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from charz_factories import case_json, make_run
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.models.comm import AlphaBeta, bus_factor
from pytest_charz.work import Collective, Work

SUITES = Path(__file__).resolve().parent.parent / "suites"
MIB = 1024**2


# ---------------------------------------------------------------- conventions and references


@pytest.mark.parametrize("op, ranks, factor", [
    ("all-reduce", 2, 1.0), ("all-reduce", 8, 1.75), ("all-gather", 2, 0.5), ("reduce-scatter", 8, 0.875),
    ("all-to-all", 4, 0.75), ("broadcast", 8, 1.0), ("p2p", 2, 1.0), ("allreduce", 4, 1.5)])
def test_bus_factors_follow_nccl_tests(op: str, ranks: int, factor: float) -> None:
    assert bus_factor(op, ranks) == pytest.approx(factor)


def test_chunked_messages_round_to_whole_chunks() -> None:
    from pytest_charz.distributed.buffers import message_elements

    assert message_elements("all-reduce", 16, 8) == 4
    assert message_elements("all-gather", 16, 8) == 8          # one float per rank at least
    assert message_elements("all-to-all", 1, 2) == 2
    assert message_elements("broadcast", 1, 2) == 1


@pytest.mark.parametrize("op", ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "p2p"])
def test_references_are_what_the_collective_means(op: str) -> None:
    from pytest_charz.distributed.buffers import message_elements, rank_input, reference

    ranks, seed = 3, 11
    n = message_elements(op, 4 * 12, ranks)
    chunk = n // ranks
    inputs = [rank_input(seed, r, chunk if op == "all-gather" else n) for r in range(ranks)]
    assert all(np.all(x != 0) for x in inputs) and not np.array_equal(inputs[0], inputs[1])
    total = inputs[0] + inputs[1] + inputs[2]
    expected = {
        "all-reduce": lambda r: total,
        "all-gather": lambda r: np.concatenate(inputs),
        "reduce-scatter": lambda r: total[r * chunk:(r + 1) * chunk],
        "all-to-all": lambda r: np.concatenate([x[r * chunk:(r + 1) * chunk] for x in inputs]),
        "broadcast": lambda r: inputs[0],
        "p2p": lambda r: inputs[(r - 1) % ranks],
    }[op]
    for rank in range(ranks):
        assert np.array_equal(reference(op, seed, rank, ranks, n), expected(rank))


# ---------------------------------------------------------------- profile and model


def _collective_case(op: str, nbytes: int, time_s: float, ranks: int = 2) -> dict[str, Any]:
    work = Work(collectives=(Collective(op, float(nbytes), ranks),), op="collective",
                shape={"collective": op, "bytes": nbytes, "ranks": ranks, "backend": "gloo",
                       "bus_factor": bus_factor(op, ranks)})
    return case_json(f"test_collective[{op}-{nbytes}-{ranks}]", work.to_json(), time_s)


def test_profile_recovers_alpha_beta_and_bus_bandwidth() -> None:
    from pytest_charz.profile.build import build_profile

    latency, algbw = 40e-6, 2e9
    cases = [_collective_case(op, size, latency + size / algbw)
             for op in ("all-reduce", "broadcast") for size in (16, 1024, 65536, MIB, 4 * MIB, 16 * MIB)]
    cases.append(_collective_case("all-reduce", MIB, 1.0, ranks=4))        # another rank count: not counted
    profile = build_profile([make_run(cases)])
    ceilings = {c["name"]: c for c in profile["ceilings"]}
    reduce = ceilings["collective:all-reduce"]
    assert reduce["latency_s"] == pytest.approx(latency, rel=1e-6)
    assert reduce["bandwidth"] == pytest.approx(algbw, rel=1e-6)
    assert reduce["value"] == pytest.approx(algbw * 1.0, rel=1e-6) and reduce["ranks"] == 2   # 2(n-1)/n = 1
    assert reduce["unit"] == "B/s" and any("4 ranks" in note for note in reduce["caveats"])
    assert ceilings["collective:broadcast"]["bus_bandwidth"] == pytest.approx(algbw, rel=1e-6)
    assert not any("does not read" in note for note in profile["caveats"])
    points = profile["curves"]["collective"]["points"]
    assert len(points) == len(cases) and {p["op"] for p in points} == {"all-reduce", "broadcast"}

    measured = Ceilings.from_profile(profile)
    assert measured.collective("all-reduce") == pytest.approx((latency, algbw, 2))
    n = 8 * MIB
    predicted = AlphaBeta().predict(Work(collectives=(Collective("all-reduce", n, 2),)), measured)
    assert predicted.covered and predicted.time_s == pytest.approx(latency + n / algbw, rel=1e-6)


def test_comm_model_scales_a_measured_line_to_other_rank_counts() -> None:
    profile = {"version": 1, "ceilings": [
        {"name": "collective:all-reduce", "bandwidth": 1e9, "latency_s": 1e-5, "ranks": 2},
        {"name": "transfer:peer", "bandwidth": 5e10, "latency_s": 1e-6}]}
    ceilings = Ceilings.from_profile(profile)
    model = AlphaBeta()
    n = 1e6
    at_two = model.predict(Work(collectives=(Collective("all-reduce", n, 2),)), ceilings)
    assert at_two.time_s == pytest.approx(1e-5 + n / 1e9)
    # Bus bandwidth held: at 4 ranks f = 1.5 (f = 1 at 2), ring latency steps 6 (2 at 2).
    at_four = model.predict(Work(collectives=(Collective("all-reduce", n, 4),)), ceilings)
    assert at_four.time_s == pytest.approx(3 * 1e-5 + n * 1.5 / 1e9)
    # An op without its own line falls back to the peer link.
    gather = model.predict(Work(collectives=(Collective("all-gather", n, 2),)), ceilings)
    assert gather.time_s == pytest.approx(0.5 * n / 5e10 + 1e-6)
    assert Ceilings.from_json(ceilings.to_json()).collective("all-reduce") == pytest.approx((1e-5, 1e9, 2))


def test_prediction_from_a_profile_uses_the_measured_collective() -> None:
    from pytest_charz.prediction import predict

    profile = {"kind": "charz-profile", "version": 1, "target": {"id": "cpu", "kind": "cpu"}, "ceilings": [
        {"name": "collective:broadcast", "bandwidth": 3e9, "latency_s": 2e-5, "ranks": 2}]}
    result = predict(Work(collectives=(Collective("broadcast", 3e6, 2),)), target="cpu", profile=profile)
    assert result.covered and result.bound == "collective:broadcast"
    assert result.time_s == pytest.approx(2e-5 + 1e-3)


# ---------------------------------------------------------------- the peers follow the sampler


class FakeRanks:
    """Records what the peers would be told; steps do nothing."""

    def __init__(self) -> None:
        self.told: list[int] = []

    def step(self, name: str, seconds: float | None = None) -> Any:
        return contextlib.nullcontext()

    def start_batch(self, calls: int) -> None:
        self.told.append(calls)


class FakeDevice:
    backend = "cpu"

    def __init__(self, call_s: float) -> None:
        self.call_s, self.timed = call_s, 0

    def timer_resolution_s(self) -> float:
        return 1e-9

    def check_sample(self) -> None:
        return None

    def time_batch(self, fn: Any, inner: int, work: Any = None) -> float:
        for _ in range(inner):
            fn()
        self.timed += inner
        return self.call_s * inner


@pytest.mark.parametrize("call_s, lead_ins", [(1e-4, 1), (1e-2, 0)])
def test_lockstep_tells_the_peers_every_batch_the_sampler_times(call_s: float, lead_ins: int) -> None:
    from pytest_charz.distributed.lockstep import LockStepDevice
    from pytest_charz.measure.sampler import SamplerSettings, sample

    class Buffers:
        op, nbytes = "all-reduce", 64
        calls = 0

        def run(self) -> None:
            Buffers.calls += 1

    ranks, device, buffers = FakeRanks(), FakeDevice(call_s), Buffers()
    lockstep = LockStepDevice(device, ranks, buffers)  # type: ignore[arg-type]
    assert lockstep.backend == "cpu"                    # everything else is the device's
    settings = SamplerSettings(max_time_s=0.05, min_samples=3, max_samples=20, warmup_s=0.0, min_time_s=0.0)
    measurement = sample(lockstep, buffers.run, settings)  # type: ignore[arg-type]
    # One command per batch, each the batch's calls plus the lead-in (only the first when calls
    # are long): rank 0 made exactly the calls the peers were told to make.
    assert len(ranks.told) == lockstep.batches >= measurement.warmup_calls + len(measurement.samples_s)
    assert sum(ranks.told) == Buffers.calls == lockstep.calls
    assert sum(ranks.told) - device.timed == (lockstep.batches if lead_ins else 1)


# ---------------------------------------------------------------- a real two-rank Gloo group


def _children() -> list[Any]:
    """The live processes under this one (one that exits while it is asked is not one)."""
    psutil = pytest.importorskip("psutil")
    live = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                live.append(child)
    return live


@pytest.fixture
def gloo_ranks() -> Iterator[Any]:
    torch = pytest.importorskip("torch")
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("no torch.distributed with Gloo")
    from pytest_charz.distributed import Ranks

    ranks = Ranks(2, "gloo", timeout_s=20.0).start()
    try:
        yield ranks
    finally:
        ranks.close()
    assert _children() == []


def test_two_gloo_ranks_all_reduce_to_the_sum(gloo_ranks: Any) -> None:
    from pytest_charz.distributed.buffers import rank_input

    buffers = gloo_ranks.prepare("all-reduce", 4096, seed=5)
    assert gloo_ranks.check(buffers) == []
    got = buffers._output.numpy()
    assert np.array_equal(got, rank_input(5, 0, 1024) + rank_input(5, 1, 1024))
    gloo_ranks.run(buffers, 3)          # rank 0 and the peer in lock-step: returns, nothing left waiting
    buffers = gloo_ranks.prepare("all-to-all", 4096, seed=6)
    assert gloo_ranks.check(buffers) == []


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["peer-killed", "peer-hangs"])
def test_a_dead_or_hung_peer_ends_the_step_clearly(gloo_ranks: Any, how: signal.Signals) -> None:
    from pytest_charz.distributed import RankFailure

    buffers = gloo_ranks.prepare("all-reduce", 65536, seed=7)
    threading.Timer(0.3, os.kill, (gloo_ranks.peers[1].pid, how)).start()
    start = time.monotonic()
    # A killed peer must end the step by itself: its deadline is far (a loaded host may run the
    # kill's timer late, and the step's deadline must not win the race and say "hangs"); a
    # stopped one is only ended by the deadline, late kill or not.
    deadline_s = 15.0 if how == signal.SIGKILL else 2.0
    with pytest.raises(RankFailure) as failure, gloo_ranks.deadline(deadline_s):
        gloo_ranks.run(buffers, 10**9)
    took = time.monotonic() - start
    assert took < 8.0
    message = str(failure.value)
    assert ("rank 1 was killed by SIGKILL" in message) if how == signal.SIGKILL else ("a rank hangs" in message)
    assert gloo_ranks.broken and _children() == []
    with pytest.raises(RankFailure, match="torn down earlier"):
        gloo_ranks.prepare("all-reduce", 16, seed=1)


# ---------------------------------------------------------------- collection


def test_quick_collection_of_the_suite(pytester: pytest.Pytester) -> None:
    def collected(*args: str) -> list[str]:
        result = pytester.runpytest_subprocess(str(SUITES / "test_collectives.py"), "--collect-only", "-q",
                                               "-p", "no:cacheprovider", *args)
        assert result.ret == 0, result.stdout.str()
        return [line for line in result.outlines if "::" in line]

    quick, full = collected("--charz-quick"), collected()
    ops = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "p2p")
    assert set(quick) < set(full)
    assert {node.split("[")[1].rsplit("-", 1)[0] for node in quick} == set(ops)
    assert all(node.endswith(("-16B]", "-1KiB]", "-64KiB]", "-1MiB]", "-4MiB]")) for node in quick)
    assert len(quick) == 5 * len(ops)
    assert any(node.endswith("-64MiB]") for node in full)


# ---------------------------------------------------------------- under a launcher (torchrun)


def test_launcher_variables_make_a_launched_rank() -> None:
    from pytest_charz.distributed import LaunchedRank, launched_rank
    from pytest_charz.errors import CharzError

    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    assert launched_rank(env) == LaunchedRank(3, 8, 1, "node0", 29500)
    assert launched_rank({k: v for k, v in env.items() if k != "LOCAL_RANK"}).local_rank == 3
    assert launched_rank({k: v for k, v in env.items() if k != "MASTER_PORT"}) is None
    assert launched_rank({}) is None
    with pytest.raises(CharzError, match="WORLD_SIZE='eight'"):
        launched_rank({**env, "WORLD_SIZE": "eight"})
    with pytest.raises(CharzError, match="RANK=8 outside WORLD_SIZE=8"):
        launched_rank({**env, "RANK": "8"})


def test_only_the_launchers_rank_0_leads_its_world() -> None:
    from pytest_charz.distributed import LaunchedRank, Ranks
    from pytest_charz.errors import CharzError

    with pytest.raises(CharzError, match="rank 1 of a 2-rank job"):
        Ranks(2, launched=LaunchedRank(1, 2, 1, "127.0.0.1", 29500))
    with pytest.raises(CharzError, match="with the job's world size"):
        Ranks(3, launched=LaunchedRank(0, 2, 0, "127.0.0.1", 29500))


def test_the_suite_joins_torchruns_ranks_instead_of_starting_its_own(tmp_path: Path) -> None:
    """``torchrun --nproc-per-node=2 -m pytest suites/test_collectives.py``: rank 0 measures and
    records two ranks' collectives, rank 1 follows it and skips its cases, no rank starts peers."""
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("no torch.distributed with Gloo")
    run = tmp_path / "run.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "pytest", str(SUITES / "test_collectives.py"), "--charz-quick", "-p", "no:cacheprovider", "-q", "-rs",
         "-k", "all-reduce-16B or p2p-1KiB", "--charz-out", str(run), "--charz-baselines", str(tmp_path / "baselines"),
         "--charz-max-time", "0.05"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "2 passed" in output and "2 skipped" in output, output[-4000:]
    assert "rank 1 of 2: this rank ran rank 0's collectives with it" in output
    from pytest_charz.run import load_run

    cases = load_run(str(run)).cases
    assert sorted(c.id.split("::")[-1] for c in cases) == ["test_collective[all-reduce-16B]",
                                                         "test_collective[p2p-1KiB]"]
    assert all(c.work.shape["ranks"] == 2 and c.work.shape["backend"] == "gloo" for c in cases)
    assert _children() == []
