"""The executor rule of workers="auto": which windows hold the GIL, when builds move to
processes and back, and how a failed trial makes the next one wait longer."""

from __future__ import annotations

import itertools
from dataclasses import replace

from aioloader.core._autotune import (
    Decision,
    ExecutorRule,
    Knobs,
    Trial,
    TunerState,
    Window,
    decide,
    holds_gil,
    processes_could_gain,
    tune,
)

RULE = ExecutorRule(processes=4, cores=8, min_busy=1.5, confirm=2, probe_every=2)
BOUNDS = Knobs(workers=4, prefetch=8, reads=64)
START = TunerState(Knobs(4, 8, 64))


def window(
    cpu: float, busy: float, *, wait: float = 5.0, steps: int = 8, build: float = 4.0
) -> Window:
    """10 s in which the consumer waited ``wait`` s, builds took ``build`` s (read 1 s), and
    build threads spent ``cpu`` CPU seconds over ``busy`` wall seconds."""
    return Window(10.0, wait, 1.0, build, False, steps, build_cpu=cpu, build_busy=busy)


GIL = window(cpu=10.0, busy=40.0)  # 4 threads busy building, 1 core between them
FREE = window(cpu=38.0, busy=40.0, wait=0.0)  # 4 threads busy, 3.8 cores


def test_window_measures() -> None:
    assert (GIL.threads_busy, GIL.cores_used, GIL.rate) == (4.0, 1.0, 0.8)


def test_threads_that_share_one_core_hold_the_gil() -> None:
    assert holds_gil(GIL, RULE, 0.05)
    assert not holds_gil(window(cpu=38.0, busy=40.0), RULE, 0.05)
    # the bound is 0.6 of min(busy, cores): 4 busy threads must use 2.4 cores
    assert holds_gil(window(cpu=23.9, busy=40.0), RULE, 0.05)
    assert not holds_gil(window(cpu=24.0, busy=40.0), RULE, 0.05)


def test_more_threads_than_cores_are_judged_against_the_cores() -> None:
    two = replace(RULE, cores=2)
    # 8 threads on 2 cores that use 1.9 of them release the GIL; 1 core between them: held
    assert not holds_gil(window(cpu=19.0, busy=80.0), two, 0.05)
    assert holds_gil(window(cpu=10.0, busy=80.0), two, 0.05)


def test_no_evidence_without_busy_threads_cores_or_a_waiting_consumer() -> None:
    assert not holds_gil(window(cpu=1.0, busy=14.0), RULE, 0.05)  # 1.4 threads busy
    assert not holds_gil(GIL, replace(RULE, cores=1), 0.05)  # processes cannot do more
    assert not holds_gil(window(cpu=10.0, busy=40.0, wait=0.4), RULE, 0.05)  # 4% < 5%
    assert not holds_gil(Window(0.0, 0.0, 0.0, 0.0, False, 0), RULE, 0.0)
    # min_busy=0: any busy thread that uses no CPU at all holds the GIL
    assert holds_gil(window(cpu=0.0, busy=0.5), replace(RULE, min_busy=0.0), 0.0)
    assert not holds_gil(window(cpu=0.0, busy=0.0), replace(RULE, min_busy=0.0), 0.0)


def test_processes_go_on_trial_only_where_they_could_use_1_5x_the_threads_cores() -> None:
    # W1u on 2 cores: 1.76 threads busy used 0.879 cores; one worker process could use 1
    two_cores = replace(RULE, processes=1, cores=2)
    held = window(cpu=8.79, busy=17.6)
    assert holds_gil(held, two_cores, 0.05)
    assert not processes_could_gain(held, two_cores)
    state = START
    for step in range(8, 200, 8):
        state, decision = tune(step, held, state, BOUNDS, 0.05, 0, two_cores)
        assert decision is None or decision.knob != "processes"
    assert state.knobs.processes == 0
    # 15 processes on 16 cores against the same threads: on trial after two windows
    sixteen = replace(RULE, processes=15, cores=16)
    assert processes_could_gain(held, sixteen)
    state, _ = tune(8, held, START, BOUNDS, 0.05, 0, sixteen)
    state, decision = tune(16, held, state, BOUNDS, 0.05, 0, sixteen)
    assert decision is not None
    assert (decision.knob, decision.new) == ("processes", 15)
    # the bound itself: 1.5 x 1.0 core used needs 2 processes (and 2 cores to run them)
    assert processes_could_gain(GIL, replace(RULE, processes=2, cores=2))
    assert not processes_could_gain(GIL, replace(RULE, processes=2, cores=1))
    assert not processes_could_gain(window(cpu=14.0, busy=40.0), replace(RULE, processes=2))


def test_two_gil_windows_put_processes_on_trial_and_a_faster_window_keeps_them() -> None:
    state, decision = tune(8, GIL, START, BOUNDS, 0.05, 0, RULE)
    assert (state, decision) == (replace(START, streak=1, since=1), None)  # the knobs hold
    state, decision = tune(16, GIL, state, BOUNDS, 0.05, 0, RULE)
    assert decision == Decision(
        16,
        "processes",
        0,
        4,
        "builds hold the GIL: 4 threads busy building used 1 cores; processes on trial "
        "against 0.8 steps/s",
    )
    assert state == TunerState(Knobs(4, 8, 64, processes=4), switch=Trial(0, 0.8))
    assert state.knobs.executor == "process"
    # the processes deliver 1.6 steps/s >= 0.8: kept; the threads stay fixed meanwhile
    on_processes = window(cpu=0.0, busy=0.0, steps=16)
    state, decision = tune(24, on_processes, state, BOUNDS, 0.05, 0, RULE)
    assert (state, decision) == (TunerState(Knobs(4, 8, 64, 4), since=1), None)


def test_a_window_that_releases_the_gil_restarts_the_count() -> None:
    state, _ = tune(8, GIL, START, BOUNDS, 0.05, 0, RULE)
    state, decision = tune(16, FREE, state, BOUNDS, 0.05, 0, RULE)
    assert (state.streak, decision) == (0, None)  # FREE: the consumer did not wait: hold
    state, decision = tune(24, GIL, state, BOUNDS, 0.05, 0, RULE)
    assert (state.streak, decision) == (1, None)


def test_slower_processes_go_back_and_the_gil_waits_longer_before_the_next_trial() -> None:
    trial = TunerState(Knobs(4, 8, 64, 4), switch=Trial(0, 0.8))
    state, decision = tune(24, window(0.0, 0.0, steps=4), trial, BOUNDS, 0.05, 0, RULE)
    assert decision == Decision(
        24, "processes", 4, 0, "0.4 steps/s on 4 processes < 0.8 on threads: back"
    )
    assert state == TunerState(Knobs(4, 8, 64), patience=2)
    # within patience, GIL windows count but the threads are tuned as without processes
    state, decision = tune(32, GIL, state, BOUNDS, 0.05, 0, RULE)
    assert decision == decide(32, GIL, START, BOUNDS, 0.05)[1]
    assert decision is not None
    assert (decision.knob, decision.old, decision.new) == ("workers", 4, 0)
    assert (state.streak, state.since) == (1, 1)


def test_processes_probe_threads_which_stay_when_about_as_fast() -> None:
    on = TunerState(Knobs(4, 8, 64, 4))
    state, decision = tune(8, window(0.0, 0.0), on, BOUNDS, 0.05, 0, RULE)
    assert (state, decision) == (replace(on, since=1), None)
    state, decision = tune(16, window(0.0, 0.0, steps=20), state, BOUNDS, 0.05, 0, RULE)
    assert decision == Decision(
        16, "processes", 4, 0, "2 windows on processes: threads on trial against 2 steps/s"
    )
    assert state == TunerState(Knobs(4, 8, 64), switch=Trial(4, 2.0))
    # threads at 1.9 steps/s >= 0.95 * 2: they stay, and the wait is probe_every again
    kept, decision = tune(24, replace(FREE, steps=19), state, BOUNDS, 0.05, 0, RULE)
    assert (kept, decision) == (TunerState(Knobs(4, 8, 64), since=1, patience=2), None)
    # at 1.8 steps/s they go back
    back, decision = tune(24, replace(FREE, steps=18), state, BOUNDS, 0.05, 0, RULE)
    assert decision == Decision(
        24, "processes", 0, 4, "1.8 steps/s on threads < 1.9 on 4 processes: back"
    )
    assert back == TunerState(Knobs(4, 8, 64, 4), patience=2)


def test_each_failed_probe_doubles_the_wait_up_to_sixteen_times() -> None:
    state = TunerState(Knobs(4, 8, 64, 4))
    probes = []
    step = 0
    for _ in range(7):
        while True:  # windows on processes until the probe
            step += 8
            state, decision = tune(step, window(0.0, 0.0), state, BOUNDS, 0.05, 0, RULE)
            if decision is not None:
                break
        assert (decision.old, decision.new) == (4, 0)
        probes.append(step)
        step += 8  # the probe: threads at half the rate go back
        state, decision = tune(step, window(10.0, 40.0, steps=4), state, BOUNDS, 0.05, 0, RULE)
        assert decision is not None
        assert (decision.old, decision.new) == (0, 4)
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    # windows of 8 steps: 2, 2, 4, 8, 16, 32, 32 windows on processes (plus the probe's)
    assert gaps == [8 * 3, 8 * 5, 8 * 9, 8 * 17, 8 * 33, 8 * 33]
    assert state.patience == 32


def test_a_thread_trial_is_judged_before_the_gil() -> None:
    on_trial = TunerState(Knobs(0, 8, 64), Trial(old=4, rate=1.0))
    assert tune(8, GIL, on_trial, BOUNDS, 0.05, 0, RULE) == decide(8, GIL, on_trial, BOUNDS, 0.05)


def test_without_processes_tune_is_decide() -> None:
    threads_only = replace(RULE, processes=0)
    state = START
    for step, measured in enumerate([GIL, GIL, GIL, FREE, GIL], start=1):
        tuned = tune(8 * step, measured, state, BOUNDS, 0.05, 0, threads_only)
        assert tuned == decide(8 * step, measured, state, BOUNDS, 0.05)
        state = tuned[0]


def test_on_processes_the_ring_still_grows_and_threads_stay() -> None:
    on = TunerState(Knobs(4, 2, 64, 4))
    rule = replace(RULE, probe_every=8)
    reads_bound = Window(10.0, 5.0, 4.0, 1.0, False, 8)
    state, decision = tune(8, reads_bound, on, Knobs(8, 16, 64), 0.05, 0, rule)
    assert decision == Decision(
        8, "prefetch", 2, 4, "consumer waited 50% of the window; read 4s > build 1s"
    )
    build_bound = Window(10.0, 5.0, 1.0, 4.0, False, 8)
    state, decision = tune(16, build_bound, state, Knobs(8, 16, 64), 0.05, 0, rule)
    assert decision == Decision(
        16, "prefetch", 4, 8, "consumer waited 50% of the window; build 4s >= read 1s"
    )
    assert state.knobs == Knobs(4, 8, 64, 4)
