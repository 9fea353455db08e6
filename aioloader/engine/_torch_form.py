"""The torch form of ``DataLoader``: torch's argument names and defaults, building the
sampler form (docs/from-torch.md has the table).

``DataLoader(dataset, sampler, collator, seed=...)`` is the sampler form. Without an aioloader
sampler and a collator it is the torch form, ``DataLoader(dataset, batch_size=1,
shuffle=False, ...)``: ``choose_form`` decides which from the arguments, refuses a mix of the
two naming both, checks torch's arguments with torch's wording where torch has one, and
returns the sampler, collator and counts the loader is built from.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import BatchPlan, Sampler, as_int, default_collate, flag, instance_not_bool, takes_plan
from ._build import collator_takes_plan
from ._torch_samplers import (
    FROM_TORCH,
    Translated,
    batch_sampler_of,
    index_sampler,
    is_aioloader_sampler,
)

TORCH_DEFAULTS: Mapping[str, Any] = {
    "batch_size": 1,
    "shuffle": False,
    "batch_sampler": None,
    "num_workers": 0,
    "collate_fn": None,
    "pin_memory": False,
    "drop_last": False,
    "timeout": 0,
    "worker_init_fn": None,
    "multiprocessing_context": None,
    "generator": None,
    "prefetch_factor": None,
    "pin_memory_device": "",
    "in_order": True,
}
"""torch's own arguments (besides ``dataset``, ``sampler`` and ``persistent_workers``, which
both forms have) and torch's defaults."""

SAMPLER_FORM_DEFAULTS: Mapping[str, Any] = {
    "workers": 0,
    "prefetch": 8,
    "start_step": 0,
    "autotune": None,
}
"""The sampler form's own arguments that the torch form names otherwise (``num_workers``,
``prefetch_factor``) or has no place for, with the sampler form's defaults."""

DEFAULT_SEED = 0
"""The torch form's seed when neither ``seed`` nor a generator gives one."""


@dataclass(frozen=True, slots=True)
class Form:
    """What a loader is built from, in the sampler form's terms.

    Attributes:
        torch: whether the arguments were the torch form's.
        sampler: the aioloader sampler.
        collator: the collator (a one-argument one stays one).
        seed: the seed, unchecked.
        workers: build threads (or processes), or ``"auto"``.
        prefetch: ring slots, or ``"auto"``.
        persistent_workers: as the sampler form takes it.
        epochs: a torch ``DistributedSampler`` whose ``set_epoch`` the loader follows.
    """

    torch: bool
    sampler: Sampler
    collator: Any
    seed: Any
    workers: int | str
    prefetch: int | str
    persistent_workers: bool | None
    epochs: Any = None


def _form_error(sampler_side: Sequence[str], torch_side: Sequence[str]) -> TypeError:
    return TypeError(
        f"DataLoader got arguments of two forms: {', '.join(sampler_side)} (the sampler form, "
        f"DataLoader(dataset, sampler, collator, seed=...)) and {', '.join(torch_side)} (the "
        f"torch form, DataLoader(dataset, batch_size=..., shuffle=..., collate_fn=...)); use "
        f"one form ({FROM_TORCH})"
    )


def choose_form(
    dataset: Any,
    sampler: Any,
    collator: Any,
    seed: Any,
    torch_args: Mapping[str, Any],
    sampler_args: Mapping[str, Any],
    *,
    executor: str,
    persistent_workers: bool | None,
) -> Form:
    """The form of a ``DataLoader(...)`` call, in the sampler form's terms.

    ``torch_args`` are the keywords the loader did not name itself; ``sampler_args`` the
    sampler form's own (``SAMPLER_FORM_DEFAULTS``) as passed.

    Raises:
        TypeError: an unknown keyword, a keyword given twice, or arguments of both forms.
        ValueError: torch arguments that torch refuses too, or that cannot be honoured.
    """
    unknown = sorted(set(torch_args) - set(TORCH_DEFAULTS))
    if unknown:
        raise TypeError(f"DataLoader() got an unexpected keyword argument {unknown[0]!r}")
    if is_aioloader_sampler(sampler) or not (collator is None or isinstance(collator, bool)):
        if torch_args:
            named = [f"{'sampler' if is_aioloader_sampler(sampler) else 'collator'}=..."]
            raise _form_error(named, [f"{name}=" for name in sorted(torch_args)])
        if collator is None:
            raise TypeError(
                "collator must be given in the sampler form, DataLoader(dataset, sampler, "
                "collator, seed=...), but got None"
            )
        if seed is None:
            raise TypeError(
                "seed must be given in the sampler form, DataLoader(dataset, sampler, "
                "collator, seed=...), but got None"
            )
        return Form(
            False,
            sampler,
            collator,
            seed,
            sampler_args["workers"],
            sampler_args["prefetch"],
            persistent_workers,
        )
    mixed = [
        f"{name}={value!r}"
        for name, value in sampler_args.items()
        if value != SAMPLER_FORM_DEFAULTS[name]
    ]
    if mixed:
        raise _form_error(mixed, [f"{name}=" for name in sorted(torch_args)] or ["batch_size"])
    arguments = dict(TORCH_DEFAULTS)
    arguments.update(torch_args)
    if isinstance(sampler, int):  # DataLoader(dataset, 64): torch's batch_size
        if "batch_size" in torch_args:
            raise TypeError("DataLoader() got multiple values for argument 'batch_size'")
        arguments["batch_size"] = sampler
        sampler = None
    if isinstance(collator, bool):  # DataLoader(dataset, 64, True): torch's shuffle
        if "shuffle" in torch_args:
            raise TypeError("DataLoader() got multiple values for argument 'shuffle'")
        arguments["shuffle"] = collator
    return _torch_form(dataset, sampler, seed, arguments, executor, persistent_workers)


def _check_counts(arguments: Mapping[str, Any]) -> int:
    """torch's checks of ``num_workers``, ``timeout``, ``prefetch_factor`` and
    ``persistent_workers``, in torch's order and words; returns ``num_workers``."""
    workers = as_int("num_workers", arguments["num_workers"])
    if workers < 0:
        raise ValueError(
            "num_workers option should be non-negative; use num_workers=0 to disable "
            f"multiprocessing (got num_workers={workers})"
        )
    timeout = arguments["timeout"]
    instance_not_bool("timeout", timeout, (int, float), "a number")
    if timeout < 0:
        raise ValueError(f"timeout option should be non-negative (got timeout={timeout})")
    if timeout > 0:
        raise ValueError(
            "timeout must be 0: aioloader waits for each batch as long as its reads take "
            f"(a read that fails raises at its step) but got timeout={timeout}"
        )
    factor = arguments["prefetch_factor"]
    if workers == 0 and factor is not None:
        raise ValueError(
            "prefetch_factor option could only be specified in multiprocessing. let "
            "num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None. "
            f"(got prefetch_factor={factor!r} with num_workers=0)"
        )
    if factor is not None and as_int("prefetch_factor", factor) < 0:
        raise ValueError(
            f"prefetch_factor option should be non-negative (got prefetch_factor={factor})"
        )
    if arguments["worker_init_fn"] is not None:
        raise ValueError(
            "worker_init_fn cannot be honoured: workers are threads of one process, so there "
            "is no worker to initialise and nothing to seed; draw randomness from the "
            f"per-sample rng of a @takes_rng transform(sample, rng) instead ({FROM_TORCH}) "
            f"but got worker_init_fn={arguments['worker_init_fn']!r}"
        )
    if arguments["multiprocessing_context"] is not None:
        raise ValueError(
            "multiprocessing_context cannot be honoured: workers are threads, and "
            "executor='process' starts its processes itself; pass None but got "
            f"{arguments['multiprocessing_context']!r}"
        )
    flag("in_order", arguments["in_order"])  # always in order: both values are honoured
    if not isinstance(arguments["pin_memory_device"], str):
        raise TypeError(
            "pin_memory_device must be a str but got "
            f"{type(arguments['pin_memory_device']).__name__}"
        )
    return workers


def _check_batching(sampler: Any, arguments: Mapping[str, Any]) -> None:
    """torch's checks of ``sampler``, ``shuffle``, ``batch_sampler``, ``batch_size`` and
    ``drop_last`` together, in torch's words."""
    shuffle = flag("shuffle", arguments["shuffle"])
    drop_last = flag("drop_last", arguments["drop_last"])
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    batch_size = arguments["batch_size"]
    if arguments["batch_sampler"] is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                "and drop_last"
            )
    elif batch_size is None:
        if drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive with "
                "drop_last"
            )
    elif as_int("batch_size", batch_size) < 1:
        raise ValueError(
            f"batch_size should be a positive integer value, but got batch_size={batch_size}"
        )


def _dataset_length(dataset: Any) -> int:
    if any(kind.__name__ == "IterableDataset" for kind in type(dataset).__mro__):
        raise TypeError(
            "dataset must be a map-style dataset (__getitem__ and __len__) but got the "
            f"IterableDataset {type(dataset).__name__}: read a stream with aioloader.Stream "
            f"({FROM_TORCH})"
        )
    try:
        return len(dataset)
    except TypeError:
        raise TypeError(
            "dataset must have __len__ in the torch form (the epoch is len(dataset) items) "
            f"but got {type(dataset).__name__}"
        ) from None


def _torch_form(
    dataset: Any,
    sampler: Any,
    seed: Any,
    arguments: Mapping[str, Any],
    executor: str,
    persistent_workers: bool | None,
) -> Form:
    workers = _check_counts(arguments)
    if persistent_workers and workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    _check_batching(sampler, arguments)
    n = _dataset_length(dataset)
    batch_size = arguments["batch_size"]
    if arguments["batch_sampler"] is not None:
        translated = batch_sampler_of(arguments["batch_sampler"], n, arguments["generator"])
    else:
        translated = index_sampler(
            sampler,
            n,
            1 if batch_size is None else batch_size,
            arguments["shuffle"],
            arguments["drop_last"],
            arguments["generator"],
        )
    factor = arguments["prefetch_factor"]
    return Form(
        True,
        translated.sampler,
        torch_collator(
            arguments["collate_fn"],
            unbatched=batch_size is None and arguments["batch_sampler"] is None,
            pin=flag("pin_memory", arguments["pin_memory"]),
        ),
        _seed(seed, translated),
        workers,
        SAMPLER_FORM_DEFAULTS["prefetch"] if factor is None else max(1, factor * workers),
        persistent_workers if persistent_workers is not True or executor == "process" else None,
        translated.epochs,
    )


def _seed(seed: Any, translated: Translated) -> Any:
    if seed is not None:
        return seed
    return DEFAULT_SEED if translated.seed is None else translated.seed


# -- collation --------------------------------------------------------------------------------


def _torch_data() -> Any:
    """``torch.utils.data`` where the program has imported torch, else None."""
    return sys.modules.get("torch.utils.data") if "torch" in sys.modules else None


def _accelerator() -> bool:
    torch: Any = sys.modules.get("torch")
    if torch is None:
        return False
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())  # pragma: no cover - torch < 2.6


def pinned(value: Any) -> Any:
    """``value`` with every tensor in it (lists, tuples, dicts) in pinned memory."""
    if isinstance(value, dict):
        return {key: pinned(item) for key, item in value.items()}
    if isinstance(value, list):
        return [pinned(item) for item in value]
    if isinstance(value, tuple):
        items = [pinned(item) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    pin = getattr(value, "pin_memory", None)
    if callable(pin) and callable(getattr(value, "is_pinned", None)):
        return pin()
    return value


@takes_plan
class TorchCollate:
    """torch's ``collate_fn`` as the loader calls collators: one sample not batched
    (``batch_size=None``), tensors pinned (``pin_memory=True`` with an accelerator).

    Attributes:
        collate: torch's ``collate_fn`` (or ``default_convert`` for one sample).
        unbatched: whether each step is one sample, collated alone.
        pin: whether the batch's tensors are pinned.
        passes_plan: whether ``collate`` is marked ``@takes_plan``.
    """

    __slots__ = ("collate", "passes_plan", "pin", "unbatched")

    def __init__(
        self, collate: Callable[..., Any], *, unbatched: bool, pin: bool, passes_plan: bool
    ) -> None:
        self.collate = collate
        self.unbatched = unbatched
        self.pin = pin
        self.passes_plan = passes_plan

    def __call__(self, samples: Sequence[Any], plan: BatchPlan) -> Any:
        if self.unbatched:
            batch = self.collate(samples[0])
        elif self.passes_plan:
            batch = self.collate(samples, plan)
        else:
            batch = self.collate(samples)
        return pinned(batch) if self.pin else batch

    def __repr__(self) -> str:
        return (
            f"TorchCollate({self.collate!r}, unbatched={self.unbatched}, pin={self.pin}, "
            f"passes_plan={self.passes_plan})"
        )


def _no_conversion(sample: Any) -> Any:
    return sample


def torch_collator(collate_fn: Any, *, unbatched: bool, pin: bool) -> Any:
    """The collator of the torch form: ``collate_fn``, or torch's ``default_collate``
    (``default_convert`` without batching) where the program has imported torch, else
    aioloader's numpy ``default_collate`` (no conversion without batching)."""
    if collate_fn is not None and not callable(collate_fn):
        raise TypeError(f"collate_fn must be callable or None but got {type(collate_fn).__name__}")
    data = _torch_data()
    if collate_fn is None:
        if unbatched:
            collate_fn = _no_conversion if data is None else data.default_convert
        else:
            collate_fn = default_collate if data is None else data.default_collate
    pin = pin and _accelerator()
    if not (unbatched or pin):
        return collate_fn
    passes_plan = not unbatched and collator_takes_plan(collate_fn)
    return TorchCollate(collate_fn, unbatched=unbatched, pin=pin, passes_plan=passes_plan)


__all__ = ("DEFAULT_SEED", "TORCH_DEFAULTS", "Form", "TorchCollate", "choose_form")
