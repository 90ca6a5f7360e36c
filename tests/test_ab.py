"""``charz ab``: the interleaving order, the pairing by round, the judgement and the exit status,
with a fake runner that times nothing; one end-to-end run of two real pytest processes that
asserts only what cannot flake (it runs and writes its report)."""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

import numpy as np
import pytest

from charz_factories import case_json, measurement_json, run_json
from pytest_charz import cli
from pytest_charz.ab.judge import CaseSamples, judge_case, outcome_at
from pytest_charz.ab.runner import PytestRoundRunner, case_samples, export_revision, parse_assignments
from pytest_charz.ab.session import AB_RESULT, Side, round_order, run_ab
from pytest_charz.errors import UsageError, run_command
from pytest_charz.report.ab_command import ab_command, add_ab_options

SIDES = (Side("A"), Side("B"))
CASES = ("suite.py::test_copy", "suite.py::test_gemm")


class FakeRunner:
    """Samples made up from a seeded generator: each process gets a factor of its own (``process``)
    and each round a factor common to its two processes (``round_factor``, the clock moving slowly
    under both); side B's times are ``b_factor`` times A's. ``clock_explains`` records each
    process's own factor as its core clock (time = cycles / clock), as the clock probe would."""

    def __init__(self, b_factor: float = 1.0, round_factor: float = 0.4, process: float = 0.0,
                 clock_explains: bool = False, seed: int = 0, missing: tuple[int, str, str] | None = None,
                 kernel_explains: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.b_factor, self.round_factor, self.process = b_factor, round_factor, process
        self.clock_explains, self.missing = clock_explains, missing
        self.kernel_explains = kernel_explains
        self.rng = np.random.default_rng(seed)
        self.rounds: dict[int, float] = {}

    def __call__(self, side: Side, round_index: int) -> Mapping[str, CaseSamples]:
        self.calls.append((side.name, round_index))
        common = self.rounds.setdefault(round_index, math.exp(self.rng.uniform(-self.round_factor, self.round_factor)))
        own = math.exp(self.rng.normal(0.0, self.process)) if self.process else 1.0
        scale = common * (self.b_factor if side.name == "B" else 1.0)
        out: dict[str, CaseSamples] = {}
        for base_s, case in zip((1e-3, 2e-4), CASES):
            if self.missing == (round_index, side.name, case):
                continue
            # Within a process: tight samples (+-0.5%), as one process measures.
            samples = base_s * scale * own * (1.0 + 0.005 * self.rng.standard_normal(40))
            # the reference kernel (1 us at factor 1) slows with the process, not with side B's change
            pace = 1e-6 * own * (1.0 + 0.005 * self.rng.standard_normal()) if self.kernel_explains else None
            out[case] = CaseSamples(tuple(samples), 2500.0 / own if self.clock_explains else None, pace_s=pace)
        return out


def test_rounds_run_in_abba_order() -> None:
    runner = FakeRunner(b_factor=1.5)
    run_ab(SIDES, runner, rounds=4, max_rounds=4)
    assert runner.calls == [("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2), ("B", 3), ("A", 3)]
    assert [round_order(i) for i in range(3)] == [(0, 1), (1, 0), (0, 1)]


def test_pairing_by_round_cancels_a_clock_that_moves_between_rounds() -> None:
    # Between rounds the times move by up to +-40% (far beyond the 10% change), but both processes
    # of a round share it: the paired ratio is tight and the 10% slowdown is found.
    result = run_ab(SIDES, FakeRunner(b_factor=1.10, round_factor=0.4), rounds=8, max_rounds=8)
    assert [c.outcome for c in result.comparisons] == ["slower", "slower"]
    for comparison in result.comparisons:
        assert comparison.decision is not None and comparison.decision.ci is not None
        assert comparison.decision.ratio == pytest.approx(1.10, rel=0.01)
        assert 1.05 < comparison.decision.ci[0] <= comparison.decision.ci[1] < 1.15
        assert comparison.rounds == 8 and comparison.fails
    assert result.fails
    # Unpaired, the same samples would overlap: the slowest A round is slower than the fastest B round.
    per_round = [(float(np.median(a[CASES[0]].samples_s)), float(np.median(b[CASES[0]].samples_s)))
                 for a, b in result.rounds]
    assert max(a for a, _ in per_round) > min(b for _, b in per_round)


@pytest.mark.parametrize("b_factor, outcome", [(1.0, "same"), (1.02, "same"), (0.88, "faster"), (1.12, "slower")])
def test_the_threshold_rule_decides_each_case(b_factor: float, outcome: str) -> None:
    result = run_ab(SIDES, FakeRunner(b_factor=b_factor), rounds=8, max_rounds=8, threshold=0.05)
    assert {c.outcome for c in result.comparisons} == {outcome}
    assert result.fails == (outcome == "slower")


def test_a_session_stops_once_every_case_is_decided_and_not_before_its_rounds() -> None:
    quick = run_ab(SIDES, FakeRunner(b_factor=1.0), rounds=8, max_rounds=30)
    assert len(quick.rounds) == 8 and quick.stopped == "every case decided after 8 rounds"
    # Each process on a clock of its own, unrecorded: the paired ratios scatter by ~30% and no
    # case is decided; the session runs to its limit and says so.
    noisy = run_ab(SIDES, FakeRunner(b_factor=1.0, round_factor=0.0, process=0.3), rounds=6, max_rounds=10)
    assert len(noisy.rounds) == 10 and noisy.stopped == "reached --max-rounds"
    assert {c.outcome for c in noisy.comparisons} == {"inconclusive"} and not noisy.fails


def test_the_recorded_clock_normalises_a_process_on_a_clock_of_its_own() -> None:
    # Each process runs at a clock of its own (+-20%), which its clock probe recorded: the raw
    # ratios cannot decide, the clock-normalised ones find the 10% slowdown and say they decided.
    runner = FakeRunner(b_factor=1.10, round_factor=0.0, process=0.2, clock_explains=True, seed=3)
    result = run_ab(SIDES, runner, rounds=8, max_rounds=8)
    for comparison in result.comparisons:
        assert comparison.outcome == "slower" and comparison.basis == "clock-normalised"
        assert comparison.raw is not None and comparison.normalised is not None
        assert comparison.normalised.width() < comparison.raw.width()
        assert outcome_at(comparison.raw.ci, 0.05) == "inconclusive"
        assert "clock-normalised B/A" in comparison.message and "(decides: narrower than raw)" in comparison.message


def test_a_round_missing_a_case_on_one_side_is_dropped_from_that_case_only() -> None:
    runner = FakeRunner(b_factor=1.10, missing=(2, "B", CASES[1]))
    result = run_ab(SIDES, runner, rounds=8, max_rounds=8)
    rounds = {c.case_id: c.rounds for c in result.comparisons}
    assert rounds == {CASES[0]: 8, CASES[1]: 7}


def test_too_few_rounds_for_an_interval_is_inconclusive_and_says_how_many() -> None:
    a, b = CaseSamples((1.0, 1.0, 1.01)), CaseSamples((2.0, 2.0, 2.02))
    comparison = judge_case("x", [(a, b)] * 5, threshold=0.05, alpha=0.05)
    assert comparison.outcome == "inconclusive" and not comparison.fails
    assert "5 paired round(s); a 95% CI over rounds needs at least 6" in comparison.message
    assert judge_case("x", [(a, b)] * 6, alpha=0.05).outcome == "slower"
    assert judge_case("x", [(a, None), (None, b)] * 4).rounds == 0


def ab_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_ab_options(parser)
    return parser.parse_args(list(argv))


def test_the_command_prints_each_case_writes_json_and_exits_1_on_a_slowdown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    made: list[tuple] = []

    def factory(*args: object, **options: object) -> FakeRunner:
        made.append(args)
        assert options == {"interleaved": True, "pin_cpus": None}
        return FakeRunner(b_factor=1.10)

    out = tmp_path / "ab.json"
    args = ab_args("suite.py", "--b-env", "CHARZ_EXTRA_WORK=1.10", "--rounds", "8", "--json", str(out),
                   "--max-time", "0.3", "--pytest-args", "--target=cpu -k gemm")
    assert ab_command(args, runner_factory=factory) == 1
    assert made[0][0] == ["suite.py"] and made[0][2:] == (["--target=cpu", "-k", "gemm"], 0.3, None)
    text = capsys.readouterr().out
    assert "B = CHARZ_EXTRA_WORK=1.10" in text and "2 cases: 2 slower; FAILED" in text
    assert all("slower       B/A  1.10" in line for line in text.splitlines() if "::test_" in line)
    document = AB_RESULT.check(json.loads(out.read_text()), str(out))
    assert document["rounds"] == 8 and document["order"][:2] == ["AB", "BA"] and document["fails"] is True
    assert document["sides"][1]["env"] == {"CHARZ_EXTRA_WORK": "1.10"}
    assert [c["outcome"] for c in document["cases"]] == ["slower", "slower"]
    assert len(document["cases"][0]["raw"]["per_round"]) == 8
    assert ab_command(ab_args("suite.py"), runner_factory=lambda *a, **k: FakeRunner(b_factor=1.0)) == 0


@pytest.mark.parametrize("argv, message", [
    (["--a-env", "NOVALUE"], "--a-env takes NAME=VALUE"),
    (["--rounds", "10", "--max-rounds", "4"], "--max-rounds must be a whole number at least --rounds (10)"),
    (["--threshold", "5"], "drift threshold must be a fraction in (0, 1)"),
    (["--b-python", "/nonexistent/python"], "--b-python: /nonexistent/python is not an executable interpreter"),
    (["--pytest-args", "--target=cpu -n 2"], "pytest-xdist workers cannot take turns"),
])
def test_bad_options_are_one_line_and_status_2_before_any_process(argv: list[str], message: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    started: list[object] = []
    args = ab_args("suite.py", *argv)
    assert run_command("charz", lambda: ab_command(args, runner_factory=lambda *a, **k: started.append(a))) == 2
    assert message in capsys.readouterr().err and started == []


def test_the_subcommand_is_registered() -> None:
    args = cli.build_parser().parse_args(["ab", "suites", "--b-env", "X=1", "--max-rounds", "12"])
    assert args.suites == ["suites"] and args.b_env == ["X=1"] and args.max_rounds == 12


def test_a_run_file_gives_each_case_its_samples_and_clock() -> None:
    clocked = {"before": {"core_clock_mhz": 2400.0}, "after": {"core_clock_mhz": 2600.0}, "interval": {"flags": []}}
    document = run_json([case_json("test_a", {}, 1e-3, measurement=measurement_json(1e-3, samples_s=[1e-3, 2e-3]),
                                   conditions=clocked),
                         case_json("test_b", {}, 2e-3, flags=["other-load"])])
    cases = case_samples(document)
    assert cases["suites/test_synth.py::test_a"] == CaseSamples((1e-3, 2e-3), 2500.0)
    assert cases["suites/test_synth.py::test_b"].clock_mhz is None
    assert cases["suites/test_synth.py::test_b"].flags == ("other-load",)


def test_the_message_counts_the_processes_whose_conditions_were_disturbed() -> None:
    quiet, loaded = CaseSamples((1.0,) * 5), CaseSamples((1.0,) * 5, flags=("other-load", "steal"))
    comparison = judge_case("x", [(quiet, loaded), (loaded, quiet)] + [(quiet, quiet)] * 6)
    assert "conditions: other-load in 2, steal in 2 (of 16 processes)" in comparison.message
    assert "conditions" not in judge_case("x", [(quiet, quiet)] * 8).message


def test_each_process_gets_the_plugins_options_and_its_sides_environment(tmp_path: Path) -> None:
    (tmp_path / "tree" / "src").mkdir(parents=True)
    runner = PytestRoundRunner(["suites"], str(tmp_path), ["--target=cpu"], max_time_s=0.3, noise=0.02,
                               base_env={"PYTHONPATH": "/elsewhere", "KEEP": "1"})
    side = Side("B", env={"CHARZ_EXTRA_WORK": "1.1"}, python="/opt/py/bin/python", directory=str(tmp_path / "tree"))
    command = runner.command(side, "out.json")
    assert command[:4] == ["/opt/py/bin/python", "-m", "pytest", "suites"]
    assert {"--charz-out=out.json", "--charz-no-save", "--charz-max-time=0.3", "--charz-noise=0.02",
            "--target=cpu"} <= set(command)
    env = runner.environment(side)
    assert env["CHARZ_EXTRA_WORK"] == "1.1" and env["KEEP"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "tree"), str(tmp_path / "tree" / "src"),
                                                   "/elsewhere"]
    assert parse_assignments(["A=1", "B_2=x=y"], "--a-env") == {"A": "1", "B_2": "x=y"}


def test_a_revision_is_exported_without_touching_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "work.py").write_text("FACTOR = 1\n")
    subprocess.run([*git, "add", "work.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    (repo / "work.py").write_text("FACTOR = 2\n")             # uncommitted: not in the revision
    tree = export_revision(str(repo), "HEAD", str(tmp_path / "tree"))
    assert (Path(tree) / "work.py").read_text() == "FACTOR = 1\n"
    assert (repo / "work.py").read_text() == "FACTOR = 2\n" and not (repo / ".git" / "worktrees").exists()
    with pytest.raises(UsageError, match="git revision 'no-such-rev'"):
        export_revision(str(repo), "no-such-rev", str(tmp_path / "other"))


SUITE = '''
import os
import pytest
from pytest_charz import Work

@pytest.mark.charz(max_time=0.05)
def test_tiny(charz):
    values = list(range(int(100 * float(os.environ.get("TINY_WORK", "1")))))
    charz.measure(lambda: sum(values), work=Work(bytes=8.0 * len(values), op="copy"))
'''


def test_end_to_end_two_real_processes_write_the_report(tmp_path: Path) -> None:
    # Real timing: only that it runs, pairs the one case and writes the report (one round is too
    # few for an interval, so the outcome is inconclusive whatever the machine does).
    (tmp_path / "test_tiny.py").write_text(SUITE)
    out = tmp_path / "ab.json"
    done = subprocess.run([sys.executable, "-m", "pytest_charz.cli", "ab", "test_tiny.py", "--b-env", "TINY_WORK=2",
                           "--rounds", "1", "--max-rounds", "1", "--json", str(out), "--keep", str(tmp_path / "runs"),
                           "--pytest-args", "--target=cpu --charz-counters=off"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(out.read_text())
    assert document["kind"] == "charz-ab" and document["rounds"] == 1
    assert [c["id"] for c in document["cases"]] == ["test_tiny.py::test_tiny"]
    assert document["cases"][0]["outcome"] == "inconclusive" and document["cases"][0]["rounds"] == 1
    assert sorted(p.name for p in (tmp_path / "runs").glob("round-*.json")) == ["round-000-A.json", "round-000-B.json"]
    assert "1 cases: 1 inconclusive" in done.stdout


class ScatteredRunner:
    """One case whose paired ratio scatters log-normally by ``scatter`` a round around ``b_factor``."""

    def __init__(self, b_factor: float, scatter: float, rng: np.random.Generator) -> None:
        self.b_factor, self.scatter, self.rng = b_factor, scatter, rng

    def __call__(self, side: Side, round_index: int) -> Mapping[str, CaseSamples]:
        factor = self.b_factor * math.exp(self.rng.normal(0.0, self.scatter)) if side.name == "B" else 1.0
        return {"case": CaseSamples((1e-3 * factor,) * 7)}


@pytest.mark.parametrize("scatter, least_caught", [(0.05, 0.95), (0.07, 0.7)])
def test_the_default_rounds_hold_and_find_a_10_percent_slowdown(scatter: float, least_caught: float) -> None:
    # The design figures of the defaults (8 to 30 rounds, a 95% interval, a 5% threshold), on
    # seeded sessions: no unchanged case called slower, a 10% slowdown caught in most sessions.
    rng = np.random.default_rng(7)
    unchanged = [run_ab(SIDES, ScatteredRunner(1.0, scatter, rng)).comparisons[0].outcome for _ in range(40)]
    slowed = [run_ab(SIDES, ScatteredRunner(1.10, scatter, rng)) for _ in range(40)]
    assert "slower" not in unchanged and "faster" not in unchanged
    caught = sum(s.comparisons[0].outcome == "slower" for s in slowed) / len(slowed)
    assert caught >= least_caught
    assert all(8 <= len(s.rounds) <= 30 for s in slowed)


def test_the_reference_kernel_normalises_a_process_that_ran_slow() -> None:
    # Each process runs +-20% slower or faster as a whole (no clock recorded): the reference kernel
    # timed between the case's batches in that process shares it, so the kernel-normalised ratios
    # find the 10% slowdown where the raw ones cannot, and none is found where nothing changed.
    runner = FakeRunner(b_factor=1.10, round_factor=0.0, process=0.2, kernel_explains=True, seed=3)
    result = run_ab(SIDES, runner, rounds=8, max_rounds=8)
    for comparison in result.comparisons:
        assert comparison.outcome == "slower" and comparison.basis == "kernel-normalised"
        assert comparison.raw is not None and outcome_at(comparison.raw.ci, 0.05) == "inconclusive"
        assert "kernel-normalised B/A" in comparison.message and "(decides: narrower than raw)" in comparison.message
    same = run_ab(SIDES, FakeRunner(b_factor=1.0, round_factor=0.0, process=0.2, kernel_explains=True, seed=4),
                  rounds=8, max_rounds=8)
    assert {c.outcome for c in same.comparisons} == {"same"} and not same.fails


def test_the_reference_kernel_is_read_from_the_run_file() -> None:
    from pytest_charz.ab.runner import case_samples

    document = {"cases": [{"id": "t.py::a", "flags": [], "conditions": {},
                           "measurement": {"samples_s": [2e-3, 2e-3], "pace": {"kind": "core-clock",
                                                                                 "samples_s": [1e-6, 3e-6, 2e-6]}}},
                          {"id": "t.py::b", "flags": [], "conditions": {}, "measurement": {"samples_s": [1e-3]}}]}
    cases = case_samples(document)
    assert cases["t.py::a"].pace_s == pytest.approx(2e-6) and cases["t.py::b"].pace_s is None
