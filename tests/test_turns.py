"""Interleaved A/B rounds: the referee's rule, the sampler's hand-overs, and two real processes
that take turns (only the order is asserted, which the blocking protocol fixes: never timing)."""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest

from pytest_charz.ab.referee import Referee, run_interleaved
from pytest_charz.measure.sampler import SamplerSettings, sample


def test_nobody_measures_until_both_have_reached_their_first_case() -> None:
    referee = Referee()
    assert referee.wait(0, "case-1") is None          # the other is still starting
    assert referee.wait(1, "case-1") == 0             # both there: the first to ask goes first
    assert referee.holder == 0


def test_two_processes_on_one_case_alternate_slice_by_slice() -> None:
    referee = Referee()
    referee.wait(0, "x")
    holder = referee.wait(1, "x")
    order = [holder]
    for _ in range(6):
        holder = referee.wait(holder, "x")            # the holder hands over after its slice
        order.append(holder)
    assert order == [0, 1, 0, 1, 0, 1, 0]


def test_the_side_behind_catches_up_before_the_other_goes_on() -> None:
    referee = Referee()
    referee.wait(0, "x")
    assert referee.wait(1, "x") == 0
    assert referee.wait(0, "y") == 1                  # 0 finished x and moved on: 1 is still on x
    assert referee.wait(1, "x") == 1                  # 1 is still behind on x: it keeps the turn
    assert referee.wait(1, "y") == 0                  # both on y now: alternation resumes
    assert referee.wait(0, "y") == 1


def test_a_case_only_one_side_has_does_not_stop_the_other() -> None:
    referee = Referee()
    referee.wait(0, "only-a")
    assert referee.wait(1, "shared") == 0             # announced first
    assert referee.wait(0, "shared") == 1             # 1 waited on shared before 0 got there
    assert referee.wait(1, "after") == 0
    assert referee.wait(0, "after") == 1


def test_an_exit_hands_the_turn_on_and_a_lone_process_keeps_it() -> None:
    referee = Referee()
    referee.wait(0, "x")
    assert referee.wait(1, "x") == 0
    assert referee.exit(0) == 1                       # 0 exited holding the turn
    assert referee.wait(1, "y") == 1                  # alone: it is granted at once
    assert referee.exit(1) is None and not referee.alive


def test_a_process_that_exits_before_its_first_case_does_not_hold_the_other() -> None:
    referee = Referee()
    assert referee.wait(0, "x") is None
    assert referee.exit(1) == 0


def test_waiting_without_the_turn_is_a_protocol_error() -> None:
    referee = Referee()
    referee.wait(0, "x")
    referee.wait(1, "x")
    with pytest.raises(ValueError, match="holds the turn"):
        referee.wait(1, "x")


def test_the_sampler_hands_over_by_slice_and_its_budget_ignores_the_waits(fake_device, fake_clock) -> None:
    # 100-130 us a call, a 0.5 s budget; every wait for the turn costs a whole second on the clock.
    turns: list[int] = []
    costs = random.Random(1)

    def take_turn() -> None:
        turns.append(fake_clock.now_ns())
        fake_clock.advance(1e9)

    device = fake_device(cost_ns=lambda: costs.uniform(1.0e5, 1.3e5))
    settings = SamplerSettings(noise_target=1e-9, max_time_s=0.5, min_batch_s=1e-3, warmup_s=0.01)
    measurement = sample(device, lambda: None, settings, take_turn=take_turn)
    assert measurement.stop_reason == "time-budget"
    assert 0.5 <= measurement.elapsed_s < 0.55        # its own time: the seconds waited are not in it
    assert measurement.sampling_s < 0.5
    # one wait before the warm-up, then one per 20 ms slice of sampling
    assert 15 <= len(turns) <= 26
    untimed = len(device.works) - measurement.warmup_calls - len(measurement.samples_s)
    assert untimed >= len(turns) - 1                  # a batch after each hand-over, untimed (plus sizing)


CHILD = r'''
import json, os, sys, time
from pytest_charz.measure.turns import process_turns
turns = process_turns()
log = open(sys.argv[1], "a")
for case in ("first", "second"):
    for piece in range(int(sys.argv[2])):
        turns.wait(case)
        log.write(json.dumps({"pid": os.getpid(), "case": case, "event": "start"}) + "\n"); log.flush()
        sum(range(20000))
        log.write(json.dumps({"pid": os.getpid(), "case": case, "event": "end",
                              "siblings": sorted(turns.sibling_pids)}) + "\n"); log.flush()
'''


def test_two_real_processes_never_run_their_slices_at_once(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    outputs = [open(tmp_path / f"out-{i}.txt", "wb") for i in range(2)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        finished = run_interleaved([[sys.executable, "-c", CHILD, str(log), "3"]] * 2, [env, env], [None, None],
                                   outputs)
    finally:
        for handle in outputs:
            handle.close()
    assert [f.returncode for f in finished] == [0, 0], [(tmp_path / f"out-{i}.txt").read_text() for i in range(2)]
    assert [f.turns for f in finished] == [6, 6]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(events) == 24
    # every slice ends before the next starts, and the two processes alternate on each case
    starts, ends = events[0::2], events[1::2]
    assert all(s["event"] == "start" and e["event"] == "end" and s["pid"] == e["pid"] for s, e in zip(starts, ends))
    pids = [s["pid"] for s in starts]
    assert all(a != b for a, b in zip(pids, pids[1:]))
    assert [s["case"] for s in starts] == ["first"] * 6 + ["second"] * 6
    # each was told the other's pid while it lived (its CPU time is not load beside the case);
    # the last slice ran after the other had exited
    assert {tuple(e["siblings"]) for e in ends[:-1]} == {(pids[1],), (pids[0],)}
    assert ends[-1]["siblings"] == []
