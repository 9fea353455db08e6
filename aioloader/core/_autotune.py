"""The autotuning rule: from a window's measurements, which knob to turn next.

A pure function of its inputs. The engine calls it at deterministic points (every
``every`` delivered batches) and applies what it returns; whatever it picks, the batch at
step ``g`` stays a pure function of ``(seed, g)``, because the knobs only change how many
steps, reads and builds run at once, never what a step holds.

Build threads are the one knob that can make a loader slower (Python code that holds the
GIL runs slower on more threads than inline), so a change of threads is a trial: the next
window's rate decides whether it stays, and a thread count measured slower is not tried
again. The ring depth and the reads in flight only grow: they cost memory, never speed.

``tune`` adds the executor: builds on threads that hold the GIL (threads busy building that
together use less than ``GIL_SHARE`` of the cores they could) move to worker processes, on
trial like a change of threads; after some windows on processes, threads are tried again
(a probe) and stay when they are about as fast. A trial that fails doubles the wait before
the next one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

KNOBS = ("workers", "prefetch", "reads", "processes")
FEWER_THREADS_TOLERANCE = 0.95
"""A trial of fewer build threads stays at this share of the rate before it, or more."""
GIL_SHARE = 0.6
"""Builds hold the GIL when the threads busy building use less than this share of the cores
they could use (``min(threads busy, cores)``)."""

PROCESS_GAIN = 1.5
"""Processes go on trial only where they could use this many times the cores the threads
used: one worker process against GIL-bound threads on two cores gains nothing it could
measure, and its start and the samples' trips cost."""
THREADS_TOLERANCE = 0.95
"""A probe of threads after processes stays at this share of the processes' rate, or more."""
PATIENCE_LIMIT = 16
"""A failed executor trial doubles the wait before the next one, up to this many times
``ExecutorRule.probe_every`` windows."""


@dataclass(frozen=True, slots=True)
class Knobs:
    """The settings the tuner turns: build threads (0: build inline), ring depth, reads, and
    the worker processes that build instead of the threads (0: threads build)."""

    workers: int
    prefetch: int
    reads: int
    processes: int = 0

    @property
    def executor(self) -> str:
        """What builds the steps: ``"thread"`` or ``"process"``."""
        return "process" if self.processes else "thread"


@dataclass(frozen=True, slots=True)
class Window:
    """What the stream did since the last decision.

    Attributes:
        elapsed: seconds of the window (on the tuner's clock).
        consumer_wait: seconds the consumer waited for batches in it.
        read: seconds builders spent reading samples.
        build: seconds spent transforming and collating.
        reads_hit_limit: whether reads in flight reached the bound.
        steps: batches delivered in it.
        build_cpu: CPU seconds the build threads spent in builds (each thread's own CPU
            time: a thread waiting for the GIL spends none).
        build_busy: wall seconds of those builds, summed over the threads.
    """

    elapsed: float
    consumer_wait: float
    read: float
    build: float
    reads_hit_limit: bool
    steps: int
    build_cpu: float = 0.0
    build_busy: float = 0.0

    @property
    def rate(self) -> float:
        """Batches delivered per second."""
        return self.steps / self.elapsed

    @property
    def threads_busy(self) -> float:
        """Build threads busy building, on average over the window."""
        return self.build_busy / self.elapsed

    @property
    def cores_used(self) -> float:
        """Cores' worth of CPU the build threads used, on average over the window."""
        return self.build_cpu / self.elapsed


@dataclass(frozen=True, slots=True)
class ExecutorRule:
    """When ``tune`` moves builds between threads and worker processes.

    Attributes:
        processes: worker processes it may move to (0: threads only).
        cores: cores of the host (with fewer than 2, processes cannot beat threads).
        min_busy: threads busy building, on average, below which a window says nothing
            about the GIL (a lone thread never waits for it).
        confirm: windows in a row that hold the GIL before processes go on trial.
        probe_every: windows on processes before threads are tried again.
    """

    processes: int = 0
    cores: int = 1
    min_busy: float = 1.5
    confirm: int = 2
    probe_every: int = 8


@dataclass(frozen=True, slots=True)
class Decision:
    """One change of a knob: at which delivered batch, from what to what, and why."""

    step: int
    knob: str
    old: int
    new: int
    reason: str


@dataclass(frozen=True, slots=True)
class Trial:
    """A change of build threads on probation, from ``old`` threads that delivered ``rate``
    steps/s (the new count is the state's ``knobs.workers``)."""

    old: int
    rate: float


@dataclass(frozen=True, slots=True)
class TunerState:
    """The knobs, the thread change on trial, the thread counts measured slower, and the
    executor's: its change on trial (``switch``: ``old`` processes), the windows in a row
    that held the GIL (``streak``), the windows since it last changed (``since``) and the
    windows it waits before the next trial (``patience``)."""

    knobs: Knobs
    trial: Trial | None = None
    slower: frozenset[int] = field(default_factory=frozenset)
    switch: Trial | None = None
    streak: int = 0
    since: int = 0
    patience: int = 0

    def back(self, slower: frozenset[int]) -> TunerState:
        """The threads before the trial, no trial, and ``slower`` as the counts measured
        slower."""
        assert self.trial is not None
        return replace(
            self, knobs=replace(self.knobs, workers=self.trial.old), trial=None, slower=slower
        )

    def switched_back(self) -> TunerState:
        """The executor before its trial, no trial."""
        assert self.switch is not None
        knobs = replace(self.knobs, processes=self.switch.old)
        return replace(self, knobs=knobs, switch=None, streak=0, since=0)


def decide(
    step: int,
    window: Window,
    state: TunerState,
    bounds: Knobs,
    wait_share: float,
    least_workers: int = 0,
) -> tuple[TunerState, Decision | None]:
    """The state after ``window`` and the knob change it makes, if any.

    ``bounds`` are the most of each knob; build threads never go below ``least_workers``
    (set it to the threads in use to keep them fixed).

    - A thread change on trial is judged first: it stays when the window delivered at
      least the rate before it (95% of it for fewer threads, which leave cores free; the
      other count joins the slower ones), else the threads go back (the trial count joins
      them).
    - The consumer waited less than ``wait_share`` of the window: hold.
    - Building took at least as long as reading: try one more build thread (up to the
      bound, never past a count measured slower), else deepen the ring while it holds fewer
      than two steps per thread, else try building inline (Python that holds the GIL is
      fastest there), then half the threads (a count measured slower is passed over for
      the next one down).
    - Reading took longer and reads in flight hit their bound: double that bound; else
      double the ring depth, so more steps read at once.

    A knob at its bound, or a thread count measured slower, passes the turn to the next.
    """
    if window.elapsed <= 0:
        return state, None
    knobs = state.knobs
    if state.trial is not None:
        trial, threads = state.trial, knobs.workers
        rate = window.rate
        # fewer threads stay unless clearly slower: at equal speed they leave cores free
        needed = trial.rate * (FEWER_THREADS_TOLERANCE if threads < trial.old else 1.0)
        if rate >= needed:  # kept; the next move may start from this window
            state = replace(state, trial=None, slower=state.slower | {trial.old})
        else:
            reason = (
                f"{rate:.4g} steps/s with {threads} threads < {trial.rate:.4g} with "
                f"{trial.old}: back"
            )
            back = state.back(state.slower | {threads})
            return back, Decision(step, "workers", threads, trial.old, reason)
    if window.consumer_wait < wait_share * window.elapsed:
        return state, None
    share = f"consumer waited {window.consumer_wait / window.elapsed:.0%} of the window"
    if window.build >= window.read:
        order: tuple[str, ...] = ("workers+", "prefetch", "workers-")
        if knobs.prefetch >= 2 * knobs.workers:
            order = ("workers+", "workers-")
        cause = f"build {window.build:.3g}s >= read {window.read:.3g}s"
    elif window.reads_hit_limit:
        order = ("reads", "prefetch", "workers+")
        cause = f"read {window.read:.3g}s > build {window.build:.3g}s, reads at their bound"
    else:
        order = ("prefetch", "reads", "workers+")
        cause = f"read {window.read:.3g}s > build {window.build:.3g}s"
    for move in order:
        new = _moved(move, knobs, bounds, state.slower, least_workers)
        if new is None:
            continue
        knob = move.rstrip("+-")
        old = getattr(knobs, knob)
        reason = f"{share}; {cause}"
        probation: Trial | None = None
        if knob == "workers":
            probation = Trial(old, window.rate)
            reason += f"; on trial against {probation.rate:.4g} steps/s"
        moved = replace(state, knobs=replace(knobs, **{knob: new}), trial=probation)
        return moved, Decision(step, knob, old, new, reason)
    return state, None


def _moved(
    move: str, knobs: Knobs, bounds: Knobs, slower: frozenset[int], least_workers: int
) -> int | None:
    """The value ``move`` turns its knob to, or None where it cannot go."""
    if move == "workers+":  # not past a count measured slower (the rate has one peak)
        new = knobs.workers + 1
        return new if new <= bounds.workers and all(s < new for s in slower) else None
    if move == "workers-":  # inline first, then half, or the next count below not slower
        halves = range(knobs.workers // 2, least_workers - 1, -1)
        tried = [least_workers, *halves]
        return next((n for n in tried if n < knobs.workers and n not in slower), None)
    old: int = getattr(knobs, move)
    bound: int = getattr(bounds, move)
    return min(bound, old * 2) if old < bound else None


def holds_gil(window: Window, rule: ExecutorRule, wait_share: float) -> bool:
    """Whether the window's builds on threads hold the GIL, so that processes could do more.

    They do when the consumer waited at least ``wait_share`` of the window, the threads were
    busy building (``rule.min_busy`` of them on average, at least) and together used less
    than ``GIL_SHARE`` of the cores they could use: ``min(threads busy, rule.cores)``. A
    thread that waits for the GIL spends no CPU time, so GIL-bound builds use about one core
    however many threads run them; builds that release it use one core per busy thread.
    """
    if rule.cores < 2 or window.elapsed <= 0:
        return False
    if window.consumer_wait < wait_share * window.elapsed:
        return False
    busy = window.threads_busy
    return busy >= rule.min_busy and window.cores_used < GIL_SHARE * min(busy, rule.cores)


def processes_could_gain(window: Window, rule: ExecutorRule) -> bool:
    """Whether ``rule.processes`` worker processes could use ``PROCESS_GAIN`` times the cores
    the window's threads used (at most ``rule.cores`` of them run at once)."""
    return min(rule.processes, rule.cores) >= PROCESS_GAIN * window.cores_used


def tune(
    step: int,
    window: Window,
    state: TunerState,
    bounds: Knobs,
    wait_share: float,
    least_workers: int,
    rule: ExecutorRule,
) -> tuple[TunerState, Decision | None]:
    """``decide``, with the executor chosen first (``rule.processes > 0``).

    - An executor change on trial is judged first: processes stay when the window was at
      least as fast as the threads before them; threads (a probe) stay at
      ``THREADS_TOLERANCE`` of the processes' rate or more. A trial that fails goes back and
      doubles ``patience`` (at least ``rule.probe_every``, at most ``PATIENCE_LIMIT`` times
      it); a probe that stays resets it to ``rule.probe_every``.
    - On processes: after ``max(rule.probe_every, patience)`` windows, threads go on trial;
      meanwhile ``decide`` turns the ring and the reads (the threads are fixed).
    - On threads, with no thread change on trial: ``rule.confirm`` windows in a row that
      hold the GIL (``holds_gil``), and at least ``patience`` windows since the last
      executor change, put processes on trial. While such windows add up, the knobs hold;
      other windows go to ``decide``.
    """
    if window.elapsed <= 0:
        return state, None
    if state.switch is not None:
        state, decision = _judge_switch(step, window, state, rule)
        if decision is not None:
            return state, decision
    knobs = state.knobs
    since = state.since + 1
    if knobs.processes:
        wait = max(rule.probe_every, state.patience)
        if since >= wait:
            reason = (
                f"{since} windows on processes: threads on trial against {window.rate:.4g} steps/s"
            )
            probe = replace(
                state,
                knobs=replace(knobs, processes=0),
                switch=Trial(knobs.processes, window.rate),
                since=0,
                streak=0,
            )
            return probe, Decision(step, "processes", knobs.processes, 0, reason)
        fixed = replace(bounds, workers=knobs.workers)
        return decide(step, window, replace(state, since=since), fixed, wait_share, knobs.workers)
    if state.trial is not None or not rule.processes:
        return decide(step, window, state, bounds, wait_share, least_workers)
    if not holds_gil(window, rule, wait_share) or not processes_could_gain(window, rule):
        state = replace(state, streak=0, since=since)
        return decide(step, window, state, bounds, wait_share, least_workers)
    streak = state.streak + 1
    state = replace(state, streak=streak, since=since)
    if since < state.patience:  # processes were slower not long ago: threads are tuned
        return decide(step, window, state, bounds, wait_share, least_workers)
    if streak < rule.confirm:
        return state, None  # hold while the evidence adds up
    reason = (
        f"builds hold the GIL: {window.threads_busy:.3g} threads busy building used "
        f"{window.cores_used:.3g} cores; processes on trial against {window.rate:.4g} steps/s"
    )
    moved = replace(
        state,
        knobs=replace(knobs, processes=rule.processes),
        switch=Trial(0, window.rate),
        streak=0,
        since=0,
    )
    return moved, Decision(step, "processes", 0, rule.processes, reason)


def _judge_switch(
    step: int, window: Window, state: TunerState, rule: ExecutorRule
) -> tuple[TunerState, Decision | None]:
    """The state after the window that judges an executor change, and the change back."""
    assert state.switch is not None
    trial, now = state.switch, state.knobs.processes
    rate = window.rate
    needed = trial.rate if now else THREADS_TOLERANCE * trial.rate
    if rate >= needed:
        patience = state.patience if now else rule.probe_every
        return replace(state, switch=None, since=0, patience=patience), None
    most = rule.probe_every * PATIENCE_LIMIT
    patience = min(most, max(rule.probe_every, 2 * state.patience))
    what = f"{now} processes" if now else "threads"
    before = f"{trial.old} processes" if trial.old else "threads"
    reason = f"{rate:.4g} steps/s on {what} < {needed:.4g} on {before}: back"
    back = replace(state.switched_back(), patience=patience)
    return back, Decision(step, "processes", now, trial.old, reason)
