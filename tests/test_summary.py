"""The session summary a person reads: problems first (drift with its figure), the cases flagged
for their conditions by cause with counts, the references saved, the time per suite file and the
slowest cases; the one-row-per-case table only on request (``-v`` or ``--charz-table``), the
problems alone with ``-qq``. A tiny suite on a fake clock, run against one baseline store."""
from __future__ import annotations

import os

import pytest

SUITE = '''
import os
import numpy as np
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

def _cost(name):
    return float(os.environ.get(f"CHARZ_TEST_{name}_NS", "100000"))

@pytest.mark.charz(noise=0.005, max_time=1.0)
def test_kernel(charz):
    fake = clock.current()
    rng = np.random.default_rng(int(os.environ.get("CHARZ_TEST_SEED", "1")))
    charz.measure(lambda: fake.advance(_cost("KERNEL") * rng.lognormal(0.0, 0.01)),
                  work=Work(flops=1e6, dtype="fp64", op="fma"))

@pytest.mark.charz(noise=0.005, max_time=1.0)
def test_neighbour(charz):
    fake = clock.current()
    rng = np.random.default_rng(int(os.environ.get("CHARZ_TEST_SEED", "1")) + 7)
    os.environ["CHARZ_TEST_STEAL_NOW"] = os.environ.get("CHARZ_TEST_STEAL", "")
    try:
        charz.measure(lambda: fake.advance(_cost("NEIGHBOUR") * rng.lognormal(0.0, 0.01)),
                      work=Work(bytes=1e6))
    finally:
        os.environ["CHARZ_TEST_STEAL_NOW"] = ""
'''

NEW_SUITE = '''
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

@pytest.mark.charz(noise=0.005, max_time=1.0)
def test_added(charz):
    fake = clock.current()
    charz.measure(lambda: fake.advance(50_000), work=Work(flops=1e5, dtype="fp64", op="fma"))
'''


@pytest.fixture
def session(pytester, fake_clock, quiet_host, monkeypatch):
    """Run the suite with the given environment; a steal of half the CPU time is seen during
    ``test_neighbour`` when ``CHARZ_TEST_STEAL`` is set."""
    from pytest_charz.measure import clock as clock_module
    from pytest_charz.measure import conditions

    def cpu_times(stat_text=None):
        jiffies = clock_module.now_ns() / 1e7
        steal = jiffies if os.environ.get("CHARZ_TEST_STEAL_NOW") else 0.0
        return {"total": 2 * jiffies, "idle": jiffies - steal / 2, "steal": steal}

    monkeypatch.setattr(conditions, "read_cpu_times", cpu_times)
    pytester.makepyfile(test_suite=SUITE)

    def run(*args, seed=1, **env):
        for name in ("CHARZ_TEST_KERNEL_NS", "CHARZ_TEST_STEAL", "CHARZ_TEST_STEAL_NOW"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("CHARZ_TEST_SEED", str(seed))
        for name, value in env.items():
            monkeypatch.setenv(f"CHARZ_TEST_{name}", str(value))
        return pytester.runpytest("--target=cpu", "--charz-out=run.json", *args)

    return run


def settled(session, pytester):
    for seed in (11, 12, 13):
        session(seed=seed).assert_outcomes(passed=2)
    pytester.makepyfile(test_new=NEW_SUITE)


def test_summary_puts_problems_first_with_counts_by_cause(session, pytester):
    settled(session, pytester)
    result = session(seed=2, KERNEL_NS=110_000, STEAL=1)
    result.assert_outcomes(passed=2, failed=1)
    text = result.stdout.str()
    lines = text[text.index("charz: measurements"):].splitlines()
    assert lines[1].startswith("target: cpu") and "3 case(s)" in lines[1]
    # problems first: the drift with its figure, before anything else
    assert lines[2] == "drift: 1 case(s)"
    assert lines[3].split()[0] == "test_kernel" and "+10." in lines[3] and "against its reference" in lines[3]
    result.stdout.fnmatch_lines([
        "flagged for conditions: 1 case(s): steal 1",
        "  steal: test_neighbour",
        "verdicts: * new*drift*",
        "references: 2 of 3 case(s) judged against a reference; 1 new reference(s) saved",
        "gate power: * of 2 cases can be judged at the 5.0% threshold (smallest detectable change *",
        "time per suite file*",
        "  test_new.py *1 cases*",
        "  test_suite.py *2 cases*",
        "slowest cases (measuring):",
        "the table of every case: pytest -v or --charz-table",
    ])
    # the one-row-per-case table only on request
    assert "CI95" not in text
    for option in ("--charz-table", "-v"):
        result = session(option, seed=3)
        result.stdout.fnmatch_lines(["*case*median*CI95*samples*achieved*% peak*flags*verdict*",
                                     "*test_added*us*GFLOP/s fp64*"])
        assert "the table of every case" not in result.stdout.str()


def test_quiet_quiet_prints_the_problems_alone(session, pytester):
    settled(session, pytester)
    result = session("-qq", seed=2, KERNEL_NS=110_000)
    text = result.stdout.str()
    assert "drift: 1 case(s)" in text
    assert "time per suite file" not in text and "verdicts:" not in text
    result = session("-qq", seed=4)
    assert "problems: none (no drift, no model-error)" in result.stdout.str()
