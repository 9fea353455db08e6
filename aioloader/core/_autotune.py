"""The autotuning rule: from a window's measurements, which knob to turn next.

A pure function of its inputs. The engine calls it at deterministic points (every
``every`` delivered batches) and applies what it returns; whatever it picks, the batch at
step ``g`` stays a pure function of ``(seed, g)``, because the knobs only change how many
steps, reads and builds run at once, never what a step holds.
"""

from __future__ import annotations

from dataclasses import dataclass

KNOBS = ("workers", "prefetch", "reads")


@dataclass(frozen=True, slots=True)
class Knobs:
    """The settings the tuner turns: build threads, ring depth, reads in flight."""

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
    """

    elapsed: float
    consumer_wait: float
    read: float
    build: float
    reads_hit_limit: bool


@dataclass(frozen=True, slots=True)
class Decision:
    """One change of a knob: at which delivered batch, from what to what, and why."""

    step: int
    knob: str
    old: int
    new: int
    reason: str


def decide(
    step: int, window: Window, knobs: Knobs, bounds: Knobs, wait_share: float
) -> Decision | None:
    """The knob to change after ``window``, or None to hold.

    - The consumer waited less than ``wait_share`` of the window: hold.
    - Building took at least as long as reading: one more build thread (up to the bound),
      else a deeper ring while it holds fewer than two steps per thread (more would only
      hold memory: the threads are the limit).
    - Reading took longer and reads in flight hit their bound: double that bound; else
      double the ring depth, so more steps read at once.

    A knob at its bound passes the turn to the next one; all at their bounds: hold.
    """
    if window.elapsed <= 0 or window.consumer_wait < wait_share * window.elapsed:
        return None
    share = f"consumer waited {window.consumer_wait / window.elapsed:.0%} of the window"
    if window.build >= window.read:
        order: tuple[str, ...] = ("workers", "prefetch")
        if knobs.prefetch >= 2 * knobs.workers:
            order = ("workers",)
        cause = f"build {window.build:.3g}s >= read {window.read:.3g}s"
    elif window.reads_hit_limit:
        order = ("reads", "prefetch", "workers")
        cause = f"read {window.read:.3g}s > build {window.build:.3g}s, reads at their bound"
    else:
        order = ("prefetch", "reads", "workers")
        cause = f"read {window.read:.3g}s > build {window.build:.3g}s"
    for knob in order:
        old = getattr(knobs, knob)
        bound = getattr(bounds, knob)
        if old < bound:
            new = min(bound, old + 1 if knob == "workers" else old * 2)
            return Decision(step, knob, old, new, f"{share}; {cause}")
    return None
