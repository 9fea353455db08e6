"""The autotuning rule: which knob a window's measurements turn, when it holds, and how a
change of build threads is judged by the next window's rate."""

from __future__ import annotations

from aioloader.core._autotune import Decision, Knobs, Trial, TunerState, Window, decide

BOUNDS = Knobs(workers=4, prefetch=16, reads=256)
START = Knobs(workers=1, prefetch=2, reads=64)


def window(wait: float, read: float, build: float, *, hit: bool = False, steps: int = 8) -> Window:
    return Window(
        elapsed=10.0, consumer_wait=wait, read=read, build=build, reads_hit_limit=hit, steps=steps
    )


def test_holds_while_the_consumer_barely_waits() -> None:
    assert decide(8, window(0.49, 9.0, 1.0), TunerState(START), BOUNDS, 0.05) == (
        TunerState(START),
        None,
    )
    empty = Window(0.0, 0.0, 0.0, 0.0, False, 0)
    assert decide(8, empty, TunerState(START), BOUNDS, 0.0) == (TunerState(START), None)


def test_build_bound_tries_one_more_thread() -> None:
    state, decision = decide(8, window(5.0, 1.0, 4.0), TunerState(START), BOUNDS, 0.05)
    assert decision == Decision(
        8,
        "workers",
        1,
        2,
        "consumer waited 50% of the window; build 4s >= read 1s; on trial against 0.8 steps/s",
    )
    assert state == TunerState(Knobs(2, 2, 64), Trial(old=1, rate=0.8))


def test_a_trial_at_least_as_fast_stays_and_the_next_move_follows() -> None:
    on_trial = TunerState(Knobs(2, 2, 64), Trial(old=1, rate=0.8))
    state, decision = decide(16, window(5.0, 1.0, 4.0, steps=8), on_trial, BOUNDS, 0.05)
    # kept (0.8 >= 0.8); 1 thread is now known slower, and 3 go on trial from this window
    assert decision is not None
    assert (decision.step, decision.knob, decision.old, decision.new) == (16, "workers", 2, 3)
    assert state == TunerState(Knobs(3, 2, 64), Trial(2, 0.8), frozenset({1}))


def test_a_slower_trial_goes_back_and_is_not_tried_again() -> None:
    on_trial = TunerState(Knobs(3, 2, 64), Trial(old=2, rate=1.0), frozenset({1}))
    state, decision = decide(24, window(5.0, 1.0, 4.0, steps=6), on_trial, BOUNDS, 0.05)
    assert decision == Decision(24, "workers", 3, 2, "0.6 steps/s with 3 threads < 1 with 2: back")
    assert state == TunerState(Knobs(2, 2, 64), None, frozenset({1, 3}))
    # 3 threads are slower and the ring holds fewer than 2 steps per thread: it deepens
    state, decision = decide(32, window(5.0, 1.0, 4.0), state, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.knob, decision.old, decision.new) == ("prefetch", 2, 4)
    # then half the threads is 1, known slower: building inline goes on trial instead
    state, decision = decide(40, window(5.0, 1.0, 4.0), state, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.knob, decision.old, decision.new) == ("workers", 2, 0)
    state, decision = decide(48, window(5.0, 1.0, 4.0, steps=4), state, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.knob, decision.old, decision.new) == ("workers", 0, 2)
    # every other count is slower: a build-bound window has nothing left to try
    assert state == TunerState(Knobs(2, 4, 64), None, frozenset({0, 1, 3}))
    assert decide(56, window(5.0, 1.0, 4.0), state, BOUNDS, 0.05) == (state, None)


def test_at_the_most_threads_a_build_bound_window_tries_inline_then_half() -> None:
    most = TunerState(Knobs(4, 8, 64))
    state, decision = decide(16, window(5.0, 1.0, 4.0), most, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.knob, decision.old, decision.new) == ("workers", 4, 0)
    state, decision = decide(24, window(5.0, 1.0, 4.0, steps=4), state, BOUNDS, 0.05)
    assert decision is not None  # half the rate: back to 4 threads
    assert (decision.knob, decision.old, decision.new) == ("workers", 0, 4)
    state, decision = decide(32, window(5.0, 1.0, 4.0), state, BOUNDS, 0.05)
    assert decision is not None  # inline is slower: half the threads go on trial
    assert (decision.knob, decision.old, decision.new) == ("workers", 4, 2)
    state, decision = decide(40, window(5.0, 1.0, 4.0, steps=16), state, BOUNDS, 0.05)
    assert decision is not None  # twice the rate: 2 stays, and 1 goes on trial
    assert (decision.knob, decision.old, decision.new) == ("workers", 2, 1)
    state, decision = decide(48, window(5.0, 1.0, 4.0, steps=12), state, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.knob, decision.old, decision.new) == ("workers", 1, 2)
    # 0, 1 and 4 threads are slower than 2, and 3 lies past 4: nothing is left to try
    assert state == TunerState(Knobs(2, 8, 64), None, frozenset({0, 1, 4}))
    assert decide(56, window(5.0, 1.0, 4.0), state, BOUNDS, 0.05) == (state, None)


def test_fixed_threads_never_move() -> None:
    fixed = TunerState(Knobs(2, 4, 64))
    assert decide(8, window(5.0, 1.0, 4.0), fixed, Knobs(2, 4, 64), 0.05, 2) == (fixed, None)


def test_build_bound_at_max_threads_deepens_the_ring() -> None:
    state, decision = decide(
        16, window(5.0, 1.0, 4.0), TunerState(Knobs(4, 2, 64)), BOUNDS, 0.05, 4
    )
    assert decision is not None
    assert (decision.step, decision.knob, decision.old, decision.new) == (16, "prefetch", 2, 4)
    assert state.trial is None
    saturated = TunerState(Knobs(4, 8, 64))
    assert decide(24, window(5.0, 1.0, 4.0), saturated, BOUNDS, 0.05, 4) == (saturated, None)


def test_read_bound_deepens_the_ring_or_doubles_reads_at_their_bound() -> None:
    _, deeper = decide(8, window(5.0, 4.0, 1.0), TunerState(START), BOUNDS, 0.05)
    assert deeper == Decision(
        8, "prefetch", 2, 4, "consumer waited 50% of the window; read 4s > build 1s"
    )
    _, more_reads = decide(8, window(5.0, 4.0, 1.0, hit=True), TunerState(START), BOUNDS, 0.05)
    assert more_reads == Decision(
        8,
        "reads",
        64,
        128,
        "consumer waited 50% of the window; read 4s > build 1s, reads at their bound",
    )


def test_doubling_stops_at_the_bound_and_all_bounds_hold() -> None:
    near = TunerState(Knobs(workers=4, prefetch=12, reads=256))
    _, decision = decide(8, window(5.0, 4.0, 1.0), near, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.knob, decision.old, decision.new) == ("prefetch", 12, 16)
    full = TunerState(BOUNDS)
    assert decide(8, window(5.0, 4.0, 1.0, hit=True), full, BOUNDS, 0.05) == (full, None)


def test_fewer_threads_stay_within_five_percent_more_must_not_be_slower() -> None:
    fewer = TunerState(Knobs(0, 4, 64), Trial(old=2, rate=1.0))
    state, decision = decide(16, Window(100.0, 0.0, 1.0, 4.0, False, 96), fewer, BOUNDS, 0.05)
    assert (state, decision) == (TunerState(Knobs(0, 4, 64), None, frozenset({2})), None)
    state, decision = decide(16, Window(100.0, 0.0, 1.0, 4.0, False, 94), fewer, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.old, decision.new, state.slower) == (0, 2, frozenset({0}))
    more = TunerState(Knobs(3, 4, 64), Trial(old=2, rate=1.0))
    _, decision = decide(16, Window(100.0, 0.0, 1.0, 4.0, False, 99), more, BOUNDS, 0.05)
    assert decision is not None
    assert (decision.old, decision.new) == (3, 2)
