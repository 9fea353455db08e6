"""What ``DataLoader.__init__`` builds from its arguments: every check, then frozen parts.

``loader_parts`` checks the arguments of either form (the sampler form and the torch form,
``_torch_form.choose_form``) in one fixed order, so a call with several bad arguments
always names the same one first, and returns a ``LoaderParts``: the frozen
``LoaderConfig`` the streams read, plus what the loader keeps beside it (the collator as
passed, the autotune settings, the first-batch check). ``tuner_of`` and ``worker_pool_of``
build the two stateful parts the loader owns from them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ..core import Knobs, as_int, check_sampler, positive_up_to, u64
from ._autotune import AutoTune, AutoTuner
from ._bad_samples import check_on_error
from ._build import SamplesOnlyCollator, collator_takes_plan, transform_takes_rng
from ._config import LoaderConfig, LoaderCounters
from ._global_random import FirstBatchCheck
from ._reads import describe_dataset_kind, sync_getter
from ._torch_form import Form, choose_form
from ._worker_pool import WorkerPool

THREADLESS_PLATFORMS = ("emscripten", "wasi")
PREFETCH_LIMIT = 1 << 16
READS_LIMIT = 1 << 20
AUTO = "auto"
AUTO_START_PREFETCH = 2
EXECUTORS = ("thread", "process")


@dataclass(frozen=True, slots=True)
class Tuning:
    """What autotuning tunes: ``workers="auto"``, ``prefetch="auto"``, and its settings.

    Attributes:
        workers: whether ``workers="auto"``.
        prefetch: whether ``prefetch="auto"``.
        settings: the bounds and pace (``AutoTune()`` when none was given).
    """

    workers: bool
    prefetch: bool
    settings: AutoTune

    @property
    def on(self) -> bool:
        """Whether anything is tuned."""
        return self.workers or self.prefetch


@dataclass(frozen=True, slots=True)
class LoaderParts:
    """A loader's checked arguments and what it builds its stateful parts from.

    Attributes:
        config: the frozen config every stream reads.
        form: the form of the call (torch's or the sampler form's); ``form.collator`` is
            the collator as passed (a one-argument collator stays one).
        build_collator: the collator as the builders call it, ``(samples, plan)``.
        first_batch: the global-generator check around the first batch (threads only).
        tuning: what autotuning tunes.
        start_step: the checked cursor to start from.
    """

    config: LoaderConfig
    form: Form
    build_collator: Callable[..., Any]
    first_batch: FirstBatchCheck | None
    tuning: Tuning
    start_step: int


def loader_parts(
    dataset: Any,
    sampler: Any,
    collator: Any,
    torch_args: Mapping[str, Any],
    *,
    seed: Any,
    transform: Any,
    workers: int | str,
    executor: str,
    persistent_workers: bool | None,
    prefetch: int | str,
    max_inflight_reads: int,
    start_step: int,
    autotune: Any,
    on_error: Any,
) -> LoaderParts:
    """Check a ``DataLoader(...)`` call's arguments and build its parts (see the class)."""
    sampler_args = {
        "workers": workers,
        "prefetch": prefetch,
        "start_step": start_step,
        "autotune": autotune,
    }
    form = choose_form(
        dataset,
        sampler,
        collator,
        seed,
        torch_args,
        sampler_args,
        executor=executor,
        persistent_workers=persistent_workers,
    )
    check_sampler(form.sampler, needs_a_step=not form.torch)
    build_collator, first_batch = _callables(form.collator, transform, executor)
    length, items = _dataset_fit(dataset, form.sampler)
    tuning = _check_auto(form.workers, form.prefetch, autotune, executor)
    requested = _requested_workers(form.workers, tuning)
    checked_seed = u64("seed", form.seed)
    threads = _check_executor(executor, requested, form.persistent_workers)
    config = LoaderConfig(
        dataset=dataset,
        sampler=form.sampler,
        collator=build_collator if first_batch is None else first_batch,
        transform=transform,
        takes_rng=transform is not None and transform_takes_rng(transform),
        seed=checked_seed,
        dataset_length=length,
        workers=threads,
        requested_workers=requested,
        executor=executor,
        prefetch=_prefetch(form.prefetch, tuning, threads),
        max_inflight_reads=positive_up_to("max_inflight_reads", max_inflight_reads, READS_LIMIT),
        on_error=check_on_error(on_error, length if length is not None else items, checked_seed),
        persistent_workers=executor == "process" and form.persistent_workers is not False,
        clock=tuning.settings.clock if tuning.on else time.perf_counter,
    )
    start = u64("start_step", start_step)
    return LoaderParts(config, form, build_collator, first_batch, tuning, start)


def _callables(
    collator: Any, transform: Any, executor: str
) -> tuple[Callable[..., Any], FirstBatchCheck | None]:
    """The collator as the builders call it, ``(samples, plan)``, and the check of the
    global generators around the first batch (threads only); ``transform`` checked."""
    if not callable(collator):
        raise TypeError(f"collator must be callable but got {type(collator).__name__}")
    build_collator: Callable[..., Any] = collator
    if not collator_takes_plan(collator):
        build_collator = SamplesOnlyCollator(cast("Callable[[Sequence[Any]], Any]", collator))
    first_batch = FirstBatchCheck(build_collator) if executor == "thread" else None
    if transform is not None and not callable(transform):
        raise TypeError(f"transform must be callable or None but got {type(transform).__name__}")
    return build_collator, first_batch


def _dataset_fit(dataset: Any, sampler: Any) -> tuple[int | None, int | None]:
    """``len(dataset)`` and the items ``sampler`` addresses (None where unknown), checked."""
    describe_dataset_kind(dataset)  # a TypeError for a dataset that cannot be read
    length = _dataset_length(dataset)
    items = _sampler_items(sampler)
    if length is not None and items is not None and items > length:
        raise ValueError(
            f"sampler must address at most len(dataset) = {length} items but "
            f"{sampler!r} addresses {items}"
        )
    return length, items


def _check_auto(workers: int | str, prefetch: int | str, autotune: Any, executor: str) -> Tuning:
    """What autotuning tunes, with ``autotune`` checked."""
    auto_workers = isinstance(workers, str) and workers == AUTO
    auto_prefetch = isinstance(prefetch, str) and prefetch == AUTO
    if autotune is not None and not isinstance(autotune, AutoTune):
        raise TypeError(f"autotune must be an AutoTune or None but got {autotune!r}")
    if autotune is not None and not (auto_workers or auto_prefetch):
        raise ValueError(
            "autotune needs workers='auto' or prefetch='auto' but got "
            f"workers={workers!r}, prefetch={prefetch!r}"
        )
    if (auto_workers or auto_prefetch) and executor != "thread":
        raise ValueError(
            "workers='auto' and prefetch='auto' tune build threads; executor must be "
            f"'thread' but got {executor!r}"
        )
    return Tuning(auto_workers, auto_prefetch, autotune if autotune is not None else AutoTune())


def _requested_workers(workers: int | str, tuning: Tuning) -> int:
    """The build threads (or processes) asked for: the most autotuning may use, or ``workers``."""
    requested = tuning.settings.max_workers if tuning.workers else as_int("workers", workers)
    if requested < 0:
        raise ValueError(f"workers must be an integer >= 0 but got {requested}")
    return requested


def _prefetch(prefetch: int | str, tuning: Tuning, threads: int) -> int:
    """Ring slots: twice the threads (at least two) when autotuned, else ``prefetch``."""
    if tuning.prefetch:
        return min(max(AUTO_START_PREFETCH, 2 * threads), tuning.settings.max_prefetch)
    return positive_up_to("prefetch", prefetch, PREFETCH_LIMIT)


def _check_executor(executor: str, requested: int, persistent_workers: Any) -> int:
    """The build threads (or processes) in use, with ``executor`` and its options checked."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be 'thread' or 'process' but got {executor!r}")
    threads = 0 if sys.platform in THREADLESS_PLATFORMS else requested
    if executor == "process" and threads < 1:
        raise ValueError(f"executor='process' requires workers >= 1 but got workers={requested}")
    if persistent_workers not in (None, True, False):
        raise TypeError(
            f"persistent_workers must be True, False or None but got {persistent_workers!r}"
        )
    if persistent_workers and executor != "process":
        raise ValueError(
            "persistent_workers=True needs executor='process' (build threads are cheap "
            f"to start) but executor={executor!r}"
        )
    return threads


def tuner_of(parts: LoaderParts, counters: LoaderCounters) -> AutoTuner | None:
    """The autotuner of a loader with ``workers="auto"`` or ``prefetch="auto"``, else None."""
    tuning, config = parts.tuning, parts.config
    if not tuning.on:
        return None
    settings = tuning.settings
    start = Knobs(config.workers, config.prefetch, config.max_inflight_reads)
    bounds = Knobs(
        max(start.workers, settings.max_workers if tuning.workers and config.workers else 0),
        max(start.prefetch, settings.max_prefetch if tuning.prefetch else 0),
        max(start.reads, settings.max_inflight_reads if tuning.prefetch else 0),
    )
    return AutoTuner(settings, start, bounds, counters, tune_workers=tuning.workers)


def worker_pool_of(parts: LoaderParts, tuner: AutoTuner | None) -> WorkerPool:
    """The loader's worker processes: ``workers`` of them, or those autotuning may move to."""
    config = parts.config
    auto_processes = tuner.rule.processes if tuner is not None else 0
    return WorkerPool(  # auto: the processes it may move to, kept once started
        auto_processes or config.workers,
        config.transform,
        parts.build_collator,
        persistent=config.persistent_workers or auto_processes > 0,
        reader=(
            sync_getter(config.dataset) if config.executor == "process" or auto_processes else None
        ),
    )


def _dataset_length(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:
        return None


def _sampler_items(sampler: Any) -> int | None:
    """The number of dataset items a sampler addresses, when it says so."""
    for name in ("num_items", "n"):
        value = getattr(sampler, name, None)
        if isinstance(value, (int, np.integer)):
            return int(value)
    sizes = getattr(sampler, "sizes", None)
    if isinstance(sizes, tuple) and all(isinstance(size, int) for size in sizes):
        return sum(sizes)
    inner = getattr(sampler, "sampler", None)
    return _sampler_items(inner) if inner is not None and inner is not sampler else None
