"""``charz sim``: the printed summary, the Chrome trace it writes, and its usage errors."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_charz import cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(["sim", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_tp8_decode_step_prints_latency_throughput_energy_and_bottleneck_and_writes_a_trace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "out.json"
    status, out, _ = run(capsys, "llama-2-70b", "--target", "h100-sxm", "--phase", "decode", "--tp", "8",
                         "--batch", "1", "--context", "4096", "--trace", str(trace))
    assert status == 0
    assert "latency: " in out and "tokens/s" in out and "J/token" in out and "bottleneck: " in out
    # One schedule: at 10 us a dispatch (eager PyTorch) the host issues 1364 ops in 13.6 ms, longer
    # than the device's own critical path (the weights' read and the all-reduces; the decode
    # attention streams its cache), so the step is host-bound, as `charz workload predict` says.
    assert "host-bound (host dispatch 13.6 ms" in out and "priced by: opclass on spec:h100-sxm" in out
    document = json.loads(trace.read_text())
    events = document["traceEvents"]
    assert document["kind"] == "charz-sim-trace" and isinstance(document["version"], int)
    for event in events:
        assert {"ph", "ts", "pid", "tid", "name"} <= set(event)
        assert event["ph"] in ("M", "X", "C")
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "stream 0" in names.values() and "dispatch" in names.values()
    assert {"compute", "memory:dram", "link:nvlink4"} <= set(names.values())
    ops = [e for e in events if e["ph"] == "X" and e["tid"] == 1]
    assert len(ops) == 1364 and all(e["dur"] >= 0 for e in ops)
    for event in (e for e in events if e["ph"] == "X"):
        assert (event["pid"], event["tid"]) in names      # every event sits on a named track
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert "memory:dram bandwidth" in counters and "dynamic power" in counters


def test_json_output_and_what_if_settings(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["llama-2-7b", "--target", "h100", "--phase", "decode", "--context", "1024", "--num-layers", "2",
            "--host-dispatch-us", "1", "--json"]
    status, out, _ = run(capsys, *base)
    document = json.loads(out)
    assert status == 0 and document["kind"] == "charz-sim-result" and document["bottleneck"] == "memory:dram"
    status, out, _ = run(capsys, *base, "--set", "memory_bandwidth=6e12")
    assert status == 0 and json.loads(out)["latency_s"] < 0.75 * document["latency_s"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--set", "hbm=1"], "known: memory_bandwidth"),
    (["--set", "memory_bandwidth=-3"], "memory_bandwidth must be > 0"),
    (["--set", "compute_units=0"], "compute_units must be a positive whole number"),
    (["--set", "memory_bandwidth"], "--set takes NAME=NUMBER"),
    (["--target", "l4"], "needs 12.* GiB per device .* l4 has 24 GiB"),
])
def test_usage_errors_say_what_is_wrong(capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    argv = ["llama-2-70b", "--phase", "decode", "--context", "4096", "--target", "h100-sxm", *extra]
    status, _, err = run(capsys, *argv)
    assert status == 2
    assert re.search(message, err), err
