"""Every command of the README runs: its shell blocks (``charz`` in process, ``pytest`` in a
subprocess) and its Python blocks, in a directory laid out by ``charz init`` as a new user's.

A block that cannot run on a CPU-only machine in seconds carries the marker
``<!-- readme-test: not run here (REASON): why -->`` on the line before it, REASON one of
``gpu``, ``long`` or ``cluster``; a test checks that each marked block really is of its kind, so
the marker cannot hide a command that would run here. Commands that characterize the suites are
run with a narrower selection (one suite file, one case: the options a user adds for a smoke
run); every other command runs exactly as written, on files named as the README names them
(``RUN.json``, ``P.json``, ``cal.json``...) made from a recorded Zen 5 run.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_charz import cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RECORDED = Path(__file__).parent / "data" / "runs"
ZEN5_RUN = RECORDED / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"
ZEN3_RUN = RECORDED / "amd-epyc-zen3-kvm-2vcpu.run.json.gz"
MARKER = re.compile(r"^<!--\s*readme-test:\s*not run here \((?P<reason>[^)]*)\):\s*(?P<why>.+?)\s*-->$")
REASONS = ("gpu", "long", "cluster")
SHELL_LANGUAGES = ("", "bash", "sh", "shell", "console")
#: How a suites command is narrowed to seconds: one suite file and one case per kind of target.
NARROW_FILE = "suites/test_runtime.py"
NARROW_CASE = {"sim": "launch_sim", "cpu": "numpy-add"}
GPU_TOOL = re.compile(r"\b(ncu|rocprof|nvidia-smi|gpu_check)\b")


@dataclass(frozen=True)
class Block:
    line: int
    language: str
    reason: str | None
    text: str


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text``, each with its marker's reason (None when unmarked)."""
    blocks = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker = MARKER.match(before)
        blocks.append(Block(text[:match.start()].count("\n") + 2, match.group(1),
                            marker.group("reason") if marker else None, match.group(2)))
    return blocks


def shell_commands(block: Block) -> list[tuple[int, list[str]]]:
    """Each command of a shell block (continuation lines joined, comments dropped) as tokens."""
    commands, pending, start = [], "", 0
    for offset, line in enumerate(block.text.splitlines()):
        if not pending:
            start = block.line + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        tokens = shlex.split(pending + line, comments=True)
        pending = ""
        if tokens:
            commands.append((start, tokens))
    return commands


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
RUNNABLE = [(block, line, tokens) for block in BLOCKS if block.reason is None
            and block.language in SHELL_LANGUAGES for line, tokens in shell_commands(block)]
PYTHON = [block for block in BLOCKS if block.reason is None and block.language == "python"]


def _subset(run: dict[str, Any], keep_every: int) -> dict[str, Any]:
    return {**run, "cases": run["cases"][::keep_every]}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory as a new user has it after ``charz init``, with the files the README's
    commands name: a run (``RUN.json``, ``.charz/runs/latest.json``), runs of two nodes, a
    profile (``P.json``), two profiles to compare and a calibration (``cal.json``)."""
    home = tmp_path_factory.mktemp("readme")
    previous = os.getcwd()
    os.chdir(home)
    try:
        assert cli.main(["init", "."]) == 0
        # a third of the recorded cases: every command still has each kind of case, in seconds
        zen5 = _subset(json.loads(gzip.decompress(ZEN5_RUN.read_bytes())), 3)
        zen3 = _subset(json.loads(gzip.decompress(ZEN3_RUN.read_bytes())), 3)
        (home / "RUN.json").write_text(json.dumps(zen5))
        (home / ".charz" / "runs").mkdir(parents=True)
        (home / ".charz" / "runs" / "latest.json").write_text(json.dumps(zen5))
        for node in (0, 1):
            other = {**zen5, "provenance": {**zen5["provenance"], "host": f"node{node}"}}
            (home / f"run-node{node}.json").write_text(json.dumps(other))
        (home / "zen3.json").write_text(json.dumps(zen3))
        assert cli.main(["profile", "RUN.json", "--name", "P"]) == 0
        (home / "A.profile.json").write_text((home / "P.json").read_text())
        assert cli.main(["profile", "zen3.json", "--name", "B.profile"]) == 0
        assert cli.main(["calibrate", ".charz/runs/latest.json", "--out", "cal.json"]) == 0
    finally:
        os.chdir(previous)
    return home


def run_pytest(tokens: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A suites command narrowed to one file and one case, run in ``cwd``."""
    args = [NARROW_FILE if arg == "suites/" else arg for arg in tokens]
    target = next((arg.split("=", 1)[1] for arg in args if arg.startswith("--target=")), "cpu")
    kind = "sim" if target.startswith("sim:") else "cpu"
    args += ["-k", NARROW_CASE[kind], "--charz-max-time=0.2", "-p", "no:cacheprovider", "-q"]
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def visible_gpu_target(tokens: list[str]) -> str | None:
    """The GPU target a command names (``--target=h200``), None for the host or a simulator."""
    for arg in tokens:
        if arg.startswith("--target="):
            name = arg.split("=", 1)[1]
            if name not in ("cpu", "host") and not name.startswith("sim:"):
                return name
    return None


def run_readme_command(tokens: list[str], cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run ``tokens`` (segments joined by ``&&``) as the README means them; fail with the output."""
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token == "&&":
            segments.append([])
        else:
            segments[-1].append(token)
    for segment in segments:
        # ``RUN.json...`` in a synopsis is "one or more run files": one is given
        program, args = segment[0], [arg[:-3] if arg.endswith(".json...") else arg for arg in segment[1:]]
        if program == "cd":
            cwd = cwd / args[0]
        elif program == "charz":
            previous = os.getcwd()
            os.chdir(cwd)
            try:
                status = cli.main(args)
            except SystemExit as exc:       # --version, --help
                status = int(exc.code or 0)
            finally:
                os.chdir(previous)
            out = capsys.readouterr()
            assert status == 0, f"charz {shlex.join(args)} exited {status}:\n{out.out}\n{out.err}"
        elif program == "pytest":
            result = run_pytest(args, cwd)
            output = result.stdout + result.stderr
            gpu = visible_gpu_target(args)
            if gpu is not None:
                # "fails cleanly when none is visible": one line naming the target, no traceback
                assert result.returncode == 4 and "is not visible on this machine" in output, output
                assert "Traceback" not in output, output
            else:
                assert result.returncode == 0, output
                assert re.search(r"\d+ passed", output), output
        else:
            pytest.fail(f"the README test does not know how to run {program!r}: mark its block or teach it")


@pytest.mark.parametrize(("block", "line", "tokens"), RUNNABLE,
                         ids=[f"L{line}-{'-'.join(tokens[:3])}" for _, line, tokens in RUNNABLE])
def test_a_readme_command_runs(block: Block, line: int, tokens: list[str], sandbox: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    run_readme_command(tokens, sandbox, capsys)


def test_the_readme_has_commands_of_every_kind() -> None:
    programs = {tokens[0] for _, _, tokens in RUNNABLE}
    assert {"charz", "pytest"} <= programs
    assert len(RUNNABLE) >= 25 and len(PYTHON) >= 4


def _is_suite_file(block: Block) -> bool:
    return "def test_" in block.text and "charz.measure" in block.text


@pytest.mark.parametrize("block", PYTHON, ids=[f"L{block.line}" for block in PYTHON])
def test_a_readme_python_block_runs(block: Block, sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(sandbox)
    if _is_suite_file(block):
        # A suite file: run as pytest runs one, in quick mode on the host.
        example = sandbox / f"test_readme_example_{block.line}.py"
        example.write_text(block.text)
        result = subprocess.run([sys.executable, "-m", "pytest", example.name, "--target=cpu", "--charz-quick",
                                 "--charz-max-time=0.2", "-p", "no:cacheprovider", "-q", f"--charz-out=example-{block.line}.json"],
                                cwd=sandbox, capture_output=True, text=True, timeout=240)
        assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout + result.stderr
        return
    namespace: dict[str, Any] = {"__name__": f"readme_{block.line}"}
    exec(compile(block.text, f"README.md:{block.line}", "exec"), namespace)
    hooks = [name for name in namespace if name.startswith("pytest_charz_")]
    if hooks:
        from pytest_charz import hookspec

        assert all(hasattr(hookspec, name) for name in hooks), hooks


def _is_long(tokens: list[str]) -> bool:
    text = " ".join(tokens)
    host_suites = "pytest suites/" in text and not re.search(r"--target=sim:", text)
    # charz ab: rounds of fresh pytest sessions per side (and a git revision or another environment)
    ab = tokens[:2] == ["charz", "ab"]
    return host_suites or ab or "pytest tests/" in text or "scripts/setup" in text


def _is_gpu(tokens: list[str]) -> bool:
    return visible_gpu_target(tokens) is not None or bool(GPU_TOOL.search(" ".join(tokens)))


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.reason is not None],
                         ids=[f"L{b.line}-{b.reason}" for b in BLOCKS if b.reason is not None])
def test_a_marker_is_only_on_gpu_long_or_cluster_blocks(block: Block) -> None:
    assert block.reason in REASONS, f"README.md:{block.line}: marker reason {block.reason!r} is not one of {REASONS}"
    kinds = {"gpu": _is_gpu, "long": _is_long, "cluster": lambda tokens: tokens[0] == "torchrun"}
    for line, tokens in shell_commands(block):
        assert kinds[str(block.reason)](tokens), (f"README.md:{line}: {shlex.join(tokens)!r} is in a block marked "
                                                  f"{block.reason!r} but is not of that kind: it must run in a test")


def test_every_marker_is_well_formed() -> None:
    text = README.read_text(encoding="utf-8")
    written = [line for line in text.splitlines() if "readme-test" in line]
    assert written and all(MARKER.match(line.strip()) for line in written), written
    marked = sum(1 for block in BLOCKS if block.reason is not None)
    assert marked == len(written), "a marker that is not right before a fenced block marks nothing"


def test_the_marker_check_refuses_a_runnable_command_marked_gpu() -> None:
    block = readme_blocks("<!-- readme-test: not run here (gpu): no -->\n```\ncharz targets\n```\n")[0]
    assert block.reason == "gpu"
    assert not _is_gpu(shell_commands(block)[0][1])
    assert _is_gpu(["pytest", "suites/", "--target=h200"]) and not _is_gpu(["pytest", "suites/", "--target=sim:h100"])


def test_the_two_first_commands_name_what_exists() -> None:
    # Marked long (they take minutes), they are checked piece by piece: the setup script, and
    # the run file a full `pytest suites/` leaves for `charz profile` to read.
    from pytest_charz.scope import FULL, LATEST_NAMES

    first = BLOCKS[0]
    assert first.reason == "long" and "./scripts/setup" in first.text
    assert os.access(ROOT / "scripts" / "setup", os.X_OK)
    assert f"charz profile .charz/runs/{LATEST_NAMES[FULL]}" in first.text
    assert "pytest tests/" in first.text
