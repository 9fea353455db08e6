"""The autotuning rule: which knob a window's measurements turn, and when it holds."""

from __future__ import annotations

from aioloader.core._autotune import Decision, Knobs, Window, decide

BOUNDS = Knobs(workers=4, prefetch=16, reads=256)
START = Knobs(workers=1, prefetch=2, reads=64)


def window(wait: float, read: float, build: float, *, hit: bool = False) -> Window:
    return Window(elapsed=10.0, consumer_wait=wait, read=read, build=build, reads_hit_limit=hit)


def test_holds_while_the_consumer_barely_waits() -> None:
    assert decide(8, window(0.49, 9.0, 1.0), START, BOUNDS, 0.05) is None
    assert decide(8, Window(0.0, 0.0, 0.0, 0.0, False), START, BOUNDS, 0.0) is None


def test_build_bound_adds_one_thread() -> None:
    assert decide(8, window(5.0, 1.0, 4.0), START, BOUNDS, 0.05) == Decision(
        8, "workers", 1, 2, "consumer waited 50% of the window; build 4s >= read 1s"
    )


def test_build_bound_at_max_threads_deepens_the_ring() -> None:
    knobs = Knobs(workers=4, prefetch=2, reads=64)
    decision = decide(16, window(5.0, 1.0, 4.0), knobs, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.step, decision.knob, decision.old, decision.new) == (16, "prefetch", 2, 4)
    saturated = Knobs(workers=4, prefetch=8, reads=64)
    assert decide(24, window(5.0, 1.0, 4.0), saturated, BOUNDS, 0.05) is None


def test_read_bound_deepens_the_ring_or_doubles_reads_at_their_bound() -> None:
    deeper = decide(8, window(5.0, 4.0, 1.0), START, BOUNDS, 0.05)
    assert deeper == Decision(
        8, "prefetch", 2, 4, "consumer waited 50% of the window; read 4s > build 1s"
    )
    more_reads = decide(8, window(5.0, 4.0, 1.0, hit=True), START, BOUNDS, 0.05)
    assert more_reads == Decision(
        8,
        "reads",
        64,
        128,
        "consumer waited 50% of the window; read 4s > build 1s, reads at their bound",
    )


def test_doubling_stops_at_the_bound_and_all_bounds_hold() -> None:
    near = Knobs(workers=4, prefetch=12, reads=256)
    decision = decide(8, window(5.0, 4.0, 1.0), near, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.knob, decision.old, decision.new) == ("prefetch", 12, 16)
    assert decide(8, window(5.0, 4.0, 1.0, hit=True), BOUNDS, BOUNDS, 0.05) is None
