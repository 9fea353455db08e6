"""The autotuning rule: from a window's measurements, which knob to turn next.

A pure function of its inputs. The engine calls it at deterministic points (every
``every`` delivered batches) and applies what it returns; whatever it picks, the batch at
step ``g`` stays a pure function of ``(seed, g)``, because the knobs only change how many
steps, reads and builds run at once, never what a step holds.

Build threads are the one knob that can make a loader slower (Python code that holds the
GIL runs slower on more threads than inline), so a change of threads is a trial: the next
window's rate decides whether it stays, and a thread count measured slower is not tried
again. The ring depth and the reads in flight only grow: they cost memory, never speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

KNOBS = ("workers", "prefetch", "reads")
FEWER_THREADS_TOLERANCE = 0.95
"""A trial of fewer build threads stays at this share of the rate before it, or more."""


@dataclass(frozen=True, slots=True)
class Knobs:
    """The settings the tuner turns: build threads (0: build inline), ring depth, reads."""

    workers: int
    prefetch: int
    reads: int


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
    """

    elapsed: float
    consumer_wait: float
    read: float
    build: float
    reads_hit_limit: bool
    steps: int

    @property
    def rate(self) -> float:
        """Batches delivered per second."""
        return self.steps / self.elapsed


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
    """The knobs, the thread change on trial, and the thread counts measured slower."""

    knobs: Knobs
    trial: Trial | None = None
    slower: frozenset[int] = field(default_factory=frozenset)

    def back(self, slower: frozenset[int]) -> TunerState:
        """The threads before the trial, no trial, and ``slower`` as the counts measured
        slower."""
        assert self.trial is not None
        return TunerState(replace(self.knobs, workers=self.trial.old), None, slower)


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
            state = TunerState(knobs, None, state.slower | {trial.old})
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
        moved = TunerState(replace(knobs, **{knob: new}), probation, state.slower)
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
