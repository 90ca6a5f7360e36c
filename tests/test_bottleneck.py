"""Bottleneck attribution: synthetic records whose verdicts are known by hand (with and without
counters), the recorded Zen 5 run against the profile it gives, every op of a recorded workload
run, and the ``charz bottleneck`` command."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Mapping

import pytest
from charz_factories import make_case, make_run

from pytest_charz import cli
from pytest_charz.evidence.bottleneck import (Bottleneck, BottleneckContext, attribute_case, attribute_op,
                                              attribute_run, context_for)
from pytest_charz.formats import BOTTLENECKS
from pytest_charz.models.ceilings import Ceilings
from pytest_charz.profile import build_profile, load_profile
from pytest_charz.records import CaseRecord, OpTiming
from pytest_charz.run import load_run
from pytest_charz.work import Work

DATA = Path(__file__).parent / "data"
ZEN5_RUN = DATA / "runs" / "amd-epyc-zen5-kvm-2vcpu.run.json.gz"
ZEN4_WORKLOADS = DATA / "runs" / "amd-epyc-zen4-kvm-2vcpu-workloads.run.json.gz"
ZEN4_PROFILE = DATA / "profiles" / "amd-epyc-zen4-kvm-2vcpu.profile.json.gz"
KIND = re.compile(r"^(compute|memory:(l1|l2|l3|dram)|latency:(l1|l2|l3|dram)|launch|dispatch|communication|"
                  r"interference|unknown)$")
# 100 GFLOP/s fp64, 50 GB/s DRAM, 10 GB/s h2d, 100 ns DRAM latency, 4 MiB of L2.
CEILINGS = Ceilings.from_profile({"version": 1, "target": {"id": "synth", "kind": "cpu", "compute_units": 1}, "ceilings": [
    {"name": "flops:fp64", "value": 1e11}, {"name": "bandwidth:dram", "value": 5e10},
    {"name": "transfer:h2d", "bandwidth": 1e10, "latency_s": 0.0}, {"name": "latency:dram", "value": 1e-7},
    {"name": "latency:l2", "value": 4e-9}, {"name": "capacity:l2", "value": 4194304}]})
CONTEXT = BottleneckContext(ceilings=CEILINGS, ceilings_origin="synthetic ceilings", dispatch_s=2e-6,
                            dispatch_source="synthetic dispatch")


def counters_json(values: Mapping[str, float], missing: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"kind": "charz-counters", "version": 1, "source": "perf_event_open", "per": "call", "calls": 100,
            "values": dict(values), "missing": dict(missing or {})}


@pytest.fixture
def counted_case() -> Any:
    """A case the Work says does 1 GFLOP and 10 MB of DRAM traffic in 11 ms (compute-bound: 10 ms
    of FLOPs at peak against 0.2 ms of DRAM), with the run file's ``counters`` record given."""
    def build(counters: Mapping[str, Any] | None, flags: tuple[str, ...] = ()) -> CaseRecord:
        extra = {"counters": counters} if counters is not None else {}
        return make_case("test_synth[counted]", {"flops": {"fp64": 1e9}, "bytes": {"dram": 1e7}, "op": "stream"},
                         0.011, flags=list(flags), **extra)
    return build


def whats(bottleneck: Bottleneck) -> list[str]:
    return [e.what for e in bottleneck.evidence]


# -- synthetic records --------------------------------------------------------------------------
def test_dominant_term_near_its_ceiling_is_medium_without_counters_and_says_so(counted_case):
    verdict = attribute_case(counted_case(None), CONTEXT)
    assert (verdict.kind, verdict.confidence, verdict.term) == ("compute", "medium", "compute:fp64")
    rate = next(e for e in verdict.evidence if e.what == "achieved fp64 FLOP rate")
    assert rate.value == pytest.approx(1e9 / 0.011) and rate.fraction == pytest.approx(1e9 / 0.011 / 1e11)
    assert rate.unit == "FLOP/s" and rate.against.startswith("flops:fp64") and "median" in rate.source
    assert "counters absent: the run recorded none for this case" in whats(verdict)
    assert verdict.alternatives[0].kind == "memory:dram"
    assert verdict.alternatives[0].margin == pytest.approx(0.01 / 2e-4)


def test_counters_that_agree_with_the_model_make_it_high(counted_case):
    verdict = attribute_case(counted_case(counters_json({"flops:fp64": 1.05e9, "instructions": 3e8})), CONTEXT)
    assert (verdict.kind, verdict.confidence) == ("compute", "high")
    counted = next(e for e in verdict.evidence if e.what.startswith("counted fp64"))
    assert counted.fraction == pytest.approx(1.05e9 / 0.011 / 1e11)
    assert "perf_event_open counters flops:fp64 per call" == counted.source


def test_counters_that_disagree_name_what_ran_and_keep_the_model_as_runner_up(counted_case):
    # ncu-style names: 0.5 GB of DRAM traffic per call is 10 ms at 50 GB/s, above the FLOPs' 5 ms.
    counters = counters_json({"dram-read-bytes": 4e8, "dram-write-bytes": 1e8, "fp64-fma-thread-inst": 2.5e8})
    verdict = attribute_case(counted_case(counters), CONTEXT)
    assert verdict.kind == "memory:dram" and verdict.confidence == "medium"
    assert verdict.alternatives[0].kind == "compute" and "counters say otherwise" in verdict.alternatives[0].note
    assert any(w.startswith("counters disagree with the model: memory:dram, not compute") for w in whats(verdict))


def test_counters_missing_give_their_reason_and_no_high_confidence(counted_case):
    counters = counters_json({}, {"fp-ops-by-width": "no portable perf_event_open encoding"})
    verdict = attribute_case(counted_case(counters), CONTEXT)
    assert verdict.confidence == "medium"
    assert "counters absent: fp-ops-by-width: no portable perf_event_open encoding" in whats(verdict)


def test_a_disturbed_measurement_lowers_the_confidence_and_cites_the_figure(counted_case):
    record = counted_case(None, flags=("other-load",))
    interval = dataclasses.replace(record.conditions.interval, other_cpu_s_per_s=0.9,
                                   top_other_processes=({"pid": 7, "name": "make", "cpu_s": 0.1},))
    record = dataclasses.replace(record, conditions=dataclasses.replace(record.conditions, interval=interval))
    verdict = attribute_case(record, CONTEXT)
    assert (verdict.kind, verdict.confidence) == ("compute", "low")
    load = next(e for e in verdict.evidence if e.what.startswith("other processes' CPU use"))
    assert load.value == pytest.approx(0.9) and "make" in load.what


def test_close_terms_are_low_and_the_margin_is_cited():
    record = make_case("test_synth[close]", {"flops": {"fp64": 1e9}, "bytes": {"dram": 4e8}, "op": "stream"}, 0.0105)
    verdict = attribute_case(record, CONTEXT)
    assert verdict.confidence == "low" and verdict.alternatives[0].margin == pytest.approx(0.01 / 0.008)
    assert any(w.startswith("close terms: compute:fp64 exceeds memory:dram by 1.25x") for w in whats(verdict))


def test_without_ceilings_or_prediction_the_bottleneck_is_unknown_with_the_reason():
    record = make_case("test_synth[bare]", {"bytes": {"dram": 1e8}, "op": "read"}, 0.01)
    verdict = attribute_case(record, BottleneckContext())
    assert (verdict.kind, verdict.confidence) == ("unknown", "low")
    assert any("no ceilings" in w for w in whats(verdict))


def test_terms_that_explain_little_of_a_disturbed_case_are_interference():
    record = make_case("test_synth[slow]", {"bytes": {"dram": 1e8}, "op": "read"}, 0.05, flags=["steal"])
    verdict = attribute_case(record, CONTEXT)
    assert (verdict.kind, verdict.confidence) == ("interference", "low")
    assert verdict.alternatives[0].kind == "memory:dram" and "explains 4% " in verdict.alternatives[0].note


def test_transfers_are_communication_and_latency_is_read_from_the_time_per_access():
    transfer = make_case("test_synth[h2d]", {"transfers": {"h2d": 1e8}, "op": "transfer"}, 0.0105)
    assert attribute_case(transfer, CONTEXT).kind == "communication"
    # 1 MiB working set fits L2 (4 ns), but 1e5 accesses took 9 ms: 90 ns each, DRAM's latency.
    chase = make_case("test_synth[chase]", {"accesses": 100000, "op": "chase",
                                            "shape": {"working_set_bytes": 1048576}}, 0.009)
    verdict = attribute_case(chase, CONTEXT)
    assert (verdict.kind, verdict.confidence, verdict.term) == ("latency:dram", "low", "latency:l2")
    assert verdict.alternatives[0].kind == "latency:l2"


def test_a_contended_case_slower_than_alone_is_interference():
    def case(label: str, role: str, median_s: float) -> dict[str, Any]:
        from charz_factories import case_json
        return case_json(f"test_pair[read]::{label}", {"bytes": {"dram": 1e8}, "op": "contention",
                                                       "shape": {"pair": "read", "role": role, "aggressor": "read x1"}},
                         median_s)
    run = make_run([case("alone", "alone", 0.0021), case("contended", "contended", 0.0040),
                    case("alone-after", "alone", 0.0022)])
    context = dataclasses.replace(CONTEXT, pairs=context_for(run).pairs)
    contended, alone = attribute_case(run.cases[1], context), attribute_case(run.cases[0], context)
    assert (contended.kind, contended.confidence) == ("interference", "high")
    assert contended.evidence[0].value == pytest.approx(0.0040 / 0.00215)
    assert contended.alternatives[0].kind == "memory:dram"
    assert alone.kind == "memory:dram" and any(w.startswith("contention pair read (alone side)") for w in whats(alone))


def test_a_workload_op_is_compute_dispatch_or_host_bound_by_its_terms():
    gemm = OpTiming("mm#0", "gemm", "mm", 0.011, Work({"fp64": 1e9}, {"dram": 1e6}, op="gemm", launches=1,
                                                                shape={"m": 1000, "n": 1000, "k": 500}))
    tiny = OpTiming("add#0", "elementwise", "add", 2.2e-6, Work({"fp64": 10.0}, {"dram": 80.0}, launches=1))
    slow = OpTiming("embedding#0", "embedding", "embedding", 5e-5, Work(None, {"dram": 800.0}, launches=1))
    assert attribute_op(gemm, CONTEXT).kind == "compute"
    small = attribute_op(tiny, CONTEXT)
    assert (small.kind, small.term, small.op_class) == ("dispatch", "dispatch", "elementwise")
    host = attribute_op(slow, CONTEXT)
    assert (host.kind, host.confidence) == ("dispatch", "low")
    assert host.evidence[0].value == pytest.approx(5e-5 - 800 / 5e10)


# -- recorded runs -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zen5() -> dict[str, Bottleneck]:
    run = load_run(str(ZEN5_RUN))
    verdicts = attribute_run(run, context_for(run, build_profile([run])))
    return {v.subject: v for v in verdicts}


@pytest.mark.parametrize("case_id, kind, confidence", [
    ("suites/test_memory.py::test_stream_cpu[triad-64MiB-arrays]", "memory:dram", "medium"),
    ("suites/test_compute.py::test_fma_cpu[fp64-threads2]", "compute", "medium"),
    ("suites/test_compute.py::test_gemm_cpu[numpy-fp64-1024]", "compute", "medium"),
    ("suites/test_memory.py::test_read_cpu[threads2-64KiB]", "memory:l1", "medium"),
    ("suites/test_memory.py::test_chase_cpu[page-local-181MiB]", "latency:dram", "medium"),
    ("suites/test_contention.py::test_contention_cpu[read-64MiB]::contended", "interference", "high"),
    ("suites/test_contention.py::test_contention_cpu[fma]::contended", "compute", "medium"),
    ("suites/test_runtime.py::test_dispatch_cpu[numpy-add]", "dispatch", "medium"),
    ("suites/test_memory.py::test_stream_cpu[add-128MiB-arrays]", "memory:dram", "low"),  # clock changed 5.1%
])
def test_the_recorded_zen5_run_against_its_own_profile(zen5, case_id, kind, confidence):
    verdict = zen5[case_id]
    assert (verdict.kind, verdict.confidence) == (kind, confidence)


def test_every_zen5_case_has_a_known_kind_and_cited_evidence(zen5):
    assert len(zen5) == 135
    for verdict in zen5.values():
        assert KIND.match(verdict.kind) and verdict.confidence in ("low", "medium", "high")
        assert verdict.evidence and all(e.what for e in verdict.evidence)
    stream = zen5["suites/test_memory.py::test_stream_cpu[triad-64MiB-arrays]"]
    rate = stream.evidence[1]
    assert rate.what == "achieved dram bandwidth" and rate.against.startswith("bandwidth:dram 54.4 GB/s")
    assert rate.fraction == pytest.approx(0.996, abs=0.01)
    gemm = zen5["suites/test_compute.py::test_gemm_cpu[numpy-fp64-1024]"]
    assert any(e.against.startswith("gemm:fp64 126 GFLOP/s") for e in gemm.evidence)


@pytest.fixture(scope="module")
def workloads() -> list[Bottleneck]:
    run = load_run(str(ZEN4_WORKLOADS))
    return list(attribute_run(run, context_for(run, load_profile(ZEN4_PROFILE))))


def test_every_workload_op_has_a_bottleneck_with_evidence(workloads):
    run = load_run(str(ZEN4_WORKLOADS))
    cases = [(case, verdict) for case, verdict in zip(run.cases, workloads) if case.ops]
    assert len(cases) == 7
    for case, verdict in cases:
        assert len(verdict.ops) == len(case.ops) > 0
        assert [op.subject for op in verdict.ops] == [f"{case.id} :: {op.name}" for op in case.ops]
        for op in verdict.ops:
            assert KIND.match(op.kind) and op.evidence and op.measured_s and op.measured_s > 0
        assert verdict.kind in {op.kind for op in verdict.ops}
        shares = [e for e in verdict.evidence if e.what.startswith("op time bound by")]
        assert shares[0].fraction == pytest.approx(
            sum(op.measured_s for op in verdict.ops if op.kind == verdict.kind) / sum(o.time_s for o in case.ops))
    dispatch = next(v for v in workloads if v.subject.endswith("test_dispatch_cpu[torch-add]"))
    assert dispatch.kind == "dispatch"


def test_bottlenecks_survive_their_json(workloads):
    for verdict in workloads:
        assert Bottleneck.from_json(json.loads(json.dumps(verdict.to_json()))) == verdict


# -- the command and the reports ---------------------------------------------------------------
def test_command_json_is_a_versioned_document_of_the_chosen_cases(tmp_path, capsys):
    out = tmp_path / "bottlenecks.json"
    assert cli.main(["bottleneck", str(ZEN4_WORKLOADS), "--profile", str(ZEN4_PROFILE), "--case", "*llama*",
                     "--format", "json", "-o", str(out)]) == 0
    document = BOTTLENECKS.load(out)
    assert [c["subject"].split("[")[1] for c in document["cases"]] == ["llama-2-7b-prefill]::end-to-end",
                                                                       "llama-2-7b-decode]::end-to-end"]
    assert all(op["evidence"] for case in document["cases"] for op in case["ops"])
    assert document["profile"] == str(ZEN4_PROFILE) and f"wrote {out}" in capsys.readouterr().out


def test_command_text_and_markdown_show_cases_and_ops(capsys):
    assert cli.main(["bottleneck", str(ZEN4_WORKLOADS), "--profile", str(ZEN4_PROFILE), "--case",
                     "*bert*", "--format", "md"]) == 0
    text = capsys.readouterr().out
    assert "## Bottlenecks" in text and "### Ops of suites/test_workloads.py::test_workload[bert-base-forward]" in text
    assert re.search(r"^\| embeddings\.word_embeddings\.embedding#0 \| embedding \| [0-9.]+ us \| dispatch \|", text,
                     flags=re.MULTILINE)
    assert cli.main(["bottleneck", str(ZEN5_RUN), "--case", "test_stream_cpu[copy-64MiB*"]) == 0
    text = " ".join(capsys.readouterr().out.split())        # the text wraps to the terminal's width
    assert "memory:dram" in text and "achieved dram bandwidth: 55.2 GB/s vs bandwidth:dram 54.4 GB/s" in text


def test_command_refuses_a_pattern_that_matches_nothing_naming_the_cases(capsys):
    assert cli.main(["bottleneck", str(ZEN5_RUN), "--case", "no-such-case"]) == 2
    err = capsys.readouterr().err
    assert "no case of the run matches 'no-such-case'" in err and "test_fma_cpu[fp64-threads2]" in err


def test_the_profile_report_gains_a_bottleneck_section_only_when_given_one():
    from pytest_charz.report.bottleneck_command import build_document
    from pytest_charz.report.bottleneck_report import markdown_section
    from pytest_charz.report.html import render_html
    from pytest_charz.report.markdown import render_markdown

    profile = load_profile(ZEN4_PROFILE)
    document = build_document(str(ZEN4_WORKLOADS), str(ZEN4_PROFILE), "*gpt2*")
    plain, with_section = render_markdown(profile), render_markdown(profile, bottlenecks=document)
    assert "## Bottlenecks" not in plain and "## Bottlenecks" in with_section
    assert with_section.index("## Ceilings") < with_section.index("## Bottlenecks") < with_section.index("## Curves")
    section = "\n".join(markdown_section(document)) + "\n"
    assert with_section == plain.replace("## Curves", section + "## Curves", 1)   # nothing else changes
    assert "| transformer.wte.embedding#0 | embedding |" in section
    pytest.importorskip("matplotlib")
    assert "<h2>Bottlenecks</h2>" in render_html(profile, bottlenecks=document)
    assert "<h2>Bottlenecks</h2>" not in render_html(profile)


def test_report_sections_for_the_pytest_hook():
    from pytest_charz.hookspec import ReportSection
    from pytest_charz.report.bottleneck_report import report_sections

    run = make_run([])
    run = run.with_cases(tuple(load_run(str(ZEN5_RUN)).cases[:4]))
    sections = report_sections(run)
    assert len(sections) == 1 and isinstance(sections[0], ReportSection)
    assert any("compute" in line for line in sections[0].lines)
