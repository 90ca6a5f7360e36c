"""The event core of the one schedule (``workloads.events``, run by the simulator and
``predict_graph``): order by (time, priority, sequence), deterministic ties, no time travel."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_charz.workloads.events import ACTIVATE, COMPLETE, ISSUE, EventQueue


def drain(queue: EventQueue) -> list[tuple[float, int, object]]:
    out = []
    while queue:
        out.append(queue.pop())
    return out


def test_events_pop_by_time_then_priority_then_the_order_they_were_scheduled() -> None:
    queue = EventQueue()
    queue.schedule(2.0, ISSUE, ISSUE, "late")
    queue.schedule(1.0, ISSUE, ISSUE, "issue-first")
    queue.schedule(1.0, COMPLETE, COMPLETE, "complete")
    queue.schedule(1.0, ISSUE, ISSUE, "issue-second")
    queue.schedule(1.0, ACTIVATE, ACTIVATE, "activate")
    assert [payload for _, _, payload in drain(queue)] == ["complete", "activate", "issue-first", "issue-second",
                                                           "late"]
    assert queue.now_s == 2.0


def test_an_event_before_the_current_time_is_refused() -> None:
    queue = EventQueue()
    queue.schedule(1.0, ISSUE, ISSUE)
    queue.pop()
    with pytest.raises(ValueError, match="before the current time"):
        queue.schedule(0.5, ISSUE, ISSUE)
    queue.schedule(1.0, ISSUE, ISSUE, "same instant is fine")
    assert queue.pop()[2] == "same instant is fine"


@given(st.lists(st.tuples(st.floats(0, 1e3, allow_nan=False), st.sampled_from([COMPLETE, ACTIVATE, ISSUE])),
                max_size=60))
def test_time_never_goes_backwards_and_ties_are_reproducible(events: list[tuple[float, int]]) -> None:
    def run() -> list[tuple[float, int, object]]:
        queue = EventQueue()
        for index, (time_s, priority) in enumerate(events):
            queue.schedule(time_s, priority, priority, index)
        return drain(queue)

    first = run()
    assert [t for t, _, _ in first] == sorted(t for t, _ in events)
    assert first == run()
    for (t0, k0, p0), (t1, k1, p1) in zip(first, first[1:]):
        assert (t0, k0) <= (t1, k1)
        if (t0, k0) == (t1, k1):
            assert p0 < p1  # type: ignore[operator]
