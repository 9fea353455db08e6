"""aioloader.engine._torch_form: torch's DataLoader arguments build the sampler form.

Against torch's own ``DataLoader``: the same batches per epoch (count, sizes, multiset of
samples); every loop an epoch of its own, even after a ``break``; exact resume; ``set_epoch``.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud

from aioloader import (
    DataLoader,
    DistributedSampler,
    SequentialSampler,
    ShuffledSampler,
    WeightedRandomSampler,
    takes_plan,
)

LENGTHS = (0, 1, 7, 64)
BATCH_SIZES = (1, 3, 64)


def loader_of(dataset: Any, *args: Any, **options: Any) -> DataLoader[Any, Any]:
    """``DataLoader(dataset, *args, **options)``: the torch form (typed for the tests)."""
    return DataLoader(dataset, *args, **options)


def values(batch: Any) -> list[int]:
    assert isinstance(batch, torch.Tensor)  # torch's default_collate: torch imported here
    return [int(value) for value in batch.tolist()]


def epoch_of(loader: Any) -> list[list[int]]:
    return [values(batch) for batch in loader]


@pytest.mark.parametrize(
    ("n", "batch_size", "shuffle", "drop_last"),
    list(itertools.product(LENGTHS, BATCH_SIZES, (False, True), (False, True))),
)
def test_same_batches_per_epoch_as_torch(
    n: int, batch_size: int, shuffle: bool, drop_last: bool
) -> None:
    dataset = list(range(n))
    options = {"batch_size": batch_size, "shuffle": shuffle, "drop_last": drop_last}
    ours = loader_of(dataset, **options)
    if n == 0 and shuffle:  # torch's RandomSampler refuses an empty dataset; here: no batch
        with pytest.raises(ValueError, match="num_samples should be a positive integer"):
            tud.DataLoader(dataset, **options)  # type: ignore[arg-type]
        assert (len(ours), epoch_of(ours), epoch_of(ours)) == (0, [], [])
        return
    theirs = tud.DataLoader(dataset, **options)  # type: ignore[arg-type, var-annotated]
    assert len(ours) == len(theirs)
    for _ in range(2):
        mine, torch_epoch = epoch_of(ours), epoch_of(theirs)
        assert [len(batch) for batch in mine] == [len(batch) for batch in torch_epoch]
        items, torch_items = Counter(itertools.chain(*mine)), Counter(itertools.chain(*torch_epoch))
        if shuffle and drop_last:  # the items dropped are drawn, in torch as here
            assert set(items.values()) <= {1}
            assert set(items) <= set(dataset)
            assert items.total() == torch_items.total()
        else:
            assert items == torch_items
        if not shuffle:
            assert mine == torch_epoch  # the same order, too


def test_torch_defaults_and_the_sampler_they_build() -> None:
    loader = loader_of(list(range(5)))
    assert repr(loader.sampler) == "SequentialSampler(n=5, batch_size=1, drop_last=False)"
    assert (loader.seed, loader.workers, len(loader)) == (0, 0, 5)
    assert epoch_of(loader) == [[0], [1], [2], [3], [4]]
    shuffled = loader_of(list(range(10)), 4, True, seed=3)  # torch's positional order
    assert repr(shuffled.sampler) == "ShuffledSampler(n=10, batch_size=4, drop_last=False)"
    assert shuffled.seed == 3
    assert loader_of(list(range(10)), batch_size=4, num_workers=2).workers == 2


def test_every_loop_is_an_epoch_even_after_a_break() -> None:
    dataset = list(range(10))
    whole = loader_of(dataset, batch_size=3, shuffle=True, seed=5)  # 4 steps an epoch
    expected = [epoch_of(whole) for _ in range(3)]
    loader = loader_of(dataset, batch_size=3, shuffle=True, seed=5)
    steps = []
    for epoch in range(3):
        seen = []
        for batch in loader:
            seen.append(values(batch))
            steps.append(loader.next_step - 1)  # the global step of the batch in hand
            if epoch == 1 and len(seen) == 2:
                break
        assert seen == expected[epoch][: len(seen)]
    assert steps == [0, 1, 2, 3, 4, 5, 8, 9, 10, 11]
    assert loader.next_step == 12


@pytest.mark.anyio
async def test_every_async_loop_is_an_epoch_even_after_a_break() -> None:
    loader = loader_of(list(range(6)), batch_size=2)
    firsts = []
    for _ in range(3):
        async for batch in loader:
            firsts.append(values(batch))
            break
    assert firsts == [[0, 1], [0, 1], [0, 1]]
    assert loader.next_step == 7  # steps 0, 3, 6 taken: epoch 2's first step, then one more


def test_a_checkpoint_mid_epoch_resumes_exactly() -> None:
    def make() -> DataLoader[Any, Any]:
        return loader_of(list(range(20)), batch_size=3, shuffle=True, drop_last=True, seed=9)

    uninterrupted = [epoch_of(loader) for loader in [make()] for _ in range(3)]
    first = make()
    assert epoch_of(first) == uninterrupted[0]
    taken = []
    for batch in first:
        taken.append(values(batch))
        if len(taken) == 4:
            state = first.state_dict()
            break
    assert state["next_step"] == 6 + 4
    resumed = make()
    resumed.load_state_dict(state)
    rest = epoch_of(resumed)  # the rest of epoch 1, not a new epoch
    assert taken + rest == uninterrupted[1]
    assert epoch_of(resumed) == uninterrupted[2]


def test_a_resume_with_set_epoch_continues_inside_that_epoch() -> None:
    def make() -> DataLoader[Any, Any]:
        return loader_of(list(range(12)), batch_size=4, shuffle=True, seed=2)

    whole = make()
    expected = [epoch_of(whole) for _ in range(3)]
    first = make()
    first.set_epoch(0)
    epoch_of(first)
    first.set_epoch(1)
    for batch in first:
        assert values(batch) == expected[1][0]
        break
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    got = []
    for epoch in range(1, 3):  # the training loop as torch users write it
        resumed.set_epoch(epoch)
        got.append(epoch_of(resumed))
    assert got == [expected[1][1:], expected[2]]


def test_set_epoch_starts_that_epoch() -> None:
    loader = loader_of(list(range(8)), batch_size=4, shuffle=True, seed=1)
    reference = loader_of(list(range(8)), batch_size=4, shuffle=True, seed=1)
    loader.set_epoch(5)
    assert epoch_of(loader) == [values(b) for b in reference.iter_sync(10, 12)]
    assert loader.next_step == 12
    loader.set_epoch(2)  # back to an earlier epoch, as torch allows
    assert epoch_of(loader) == [values(b) for b in reference.iter_sync(4, 6)]
    sampler_form = loader_of(list(range(8)), SequentialSampler(8, 4), list, seed=0)
    sampler_form.set_epoch(3)
    assert [len(batch) for batch in sampler_form] == [4, 4]
    assert sampler_form.next_step == 8
    with pytest.raises(ValueError, match=r"epoch must be an integer in \[0, 2\^64\) but got -1"):
        loader.set_epoch(-1)


def test_torch_distributed_sampler_and_its_set_epoch() -> None:
    dataset = list(range(10))
    ranks = []
    for rank in range(2):
        sampler: Any = tud.DistributedSampler(dataset, num_replicas=2, rank=rank, seed=4)  # type: ignore[arg-type]
        loader = loader_of(dataset, batch_size=2, sampler=sampler)
        shard = DistributedSampler(10, 2, rank, 2, shuffle=True)
        assert loader.sampler.fingerprint_fields() == shard.fingerprint_fields()  # type: ignore[attr-defined]
        assert loader.seed == 4
        epochs = []
        for epoch in range(3):
            sampler.set_epoch(epoch)
            epochs.append(epoch_of(loader))
        sampler.set_epoch(1)  # again: the same epoch as before
        assert epoch_of(loader) == epochs[1]
        ranks.append(epochs)
    for epoch in range(3):  # the ranks share each epoch out, torch's way
        both = list(itertools.chain(*ranks[0][epoch], *ranks[1][epoch]))
        assert sorted(both) == dataset
    assert ranks[0][0] != ranks[0][1]


def test_torch_samplers_and_batch_samplers_are_translated() -> None:
    dataset = list(range(9))
    ordered = loader_of(dataset, batch_size=4, sampler=tud.SequentialSampler(dataset))
    assert epoch_of(ordered) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    generator = torch.Generator().manual_seed(77)
    random_sampler: Any = tud.RandomSampler(dataset, generator=generator)
    shuffled = loader_of(dataset, batch_size=4, sampler=random_sampler)
    assert isinstance(shuffled.sampler, ShuffledSampler)
    assert shuffled.seed == 77
    assert sorted(itertools.chain(*epoch_of(shuffled))) == dataset
    batches: Any = tud.BatchSampler(tud.SequentialSampler(dataset), 2, drop_last=True)
    assert epoch_of(loader_of(dataset, batch_sampler=batches)) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    own = loader_of(dataset, batch_sampler=ShuffledSampler(9, 3), seed=1)
    assert sorted(itertools.chain(*epoch_of(own))) == dataset
    weighted = WeightedRandomSampler([0.0, 1.0] * 4 + [0.0], 6, 3)
    drawn = epoch_of(loader_of(dataset, batch_sampler=weighted))
    assert len(drawn) == 2
    assert set(itertools.chain(*drawn)) <= {1, 3, 5, 7}


def test_batch_size_none_serves_samples_unbatched() -> None:
    loader = loader_of([np.arange(2), np.arange(2) + 5], batch_size=None)
    batches = list(loader)
    assert [type(batch) for batch in batches] == [torch.Tensor, torch.Tensor]  # default_convert
    assert [batch.tolist() for batch in batches] == [[0, 1], [5, 6]]
    plain = loader_of([(1, "a"), (2, "b")], batch_size=None, collate_fn=lambda sample: sample)
    assert list(plain) == [(1, "a"), (2, "b")]


def test_collate_fn_as_torch_calls_it_and_a_marked_one_gets_the_plan() -> None:
    samples = [(torch.full((2,), float(i)), i) for i in range(6)]
    loader = loader_of(samples, batch_size=3, collate_fn=tud.default_collate, pin_memory=True)
    for images, labels in loader:  # torch's default_collate: a list of two tensors
        assert images.shape == (3, 2)
        assert labels.tolist() == [loader.next_step * 3 - 3 + k for k in range(3)]

    @takes_plan
    def stamped(batch: list[Any], plan: Any) -> int:
        return int(plan.global_step)

    assert list(loader_of(samples, batch_size=3, collate_fn=stamped)) == [0, 1]


def test_the_forms_are_not_mixed() -> None:
    data = list(range(8))
    with pytest.raises(TypeError) as mixed:
        loader_of(data, SequentialSampler(8, 2), list, seed=0, batch_size=2)
    assert "sampler=... (the sampler form" in str(mixed.value)
    assert "batch_size= (the torch form" in str(mixed.value)
    with pytest.raises(TypeError) as other:
        loader_of(data, batch_size=2, workers=2)
    assert "workers=2 (the sampler form" in str(other.value)
    assert "batch_size= (the torch form" in str(other.value)
    with pytest.raises(TypeError, match=r"collator=\.\.\. \(the sampler form.*collate_fn="):
        loader_of(data, collator=list, collate_fn=list)
    with pytest.raises(TypeError, match="collator must be given in the sampler form"):
        loader_of(data, SequentialSampler(8, 2))
    with pytest.raises(TypeError, match="seed must be given in the sampler form"):
        loader_of(data, SequentialSampler(8, 2), list)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        loader_of(data, batchsize=2)
    with pytest.raises(TypeError, match="multiple values for argument 'batch_size'"):
        loader_of(data, 2, batch_size=2)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"sampler": "S", "shuffle": True}, ValueError, "sampler option is mutually exclusive "),
        ({"batch_sampler": "B", "batch_size": 2}, ValueError, "batch_sampler option is mutually"),
        ({"batch_sampler": "B", "drop_last": True}, ValueError, "batch_sampler option is mutual"),
        ({"batch_sampler": "B", "sampler": "S"}, ValueError, "batch_sampler option is mutually"),
        ({"batch_size": None, "drop_last": True}, ValueError, "batch_size=None option disables"),
        ({"batch_size": 0}, ValueError, "batch_size should be a positive integer value, but got"),
        ({"timeout": -1}, ValueError, "timeout option should be non-negative"),
        ({"timeout": 5}, ValueError, "timeout must be 0: aioloader waits"),
        ({"timeout": True}, TypeError, "timeout must be a number but got bool (True)"),
        ({"timeout": "0"}, TypeError, "timeout must be a number but got str ('0')"),
        ({"num_workers": -1}, ValueError, "num_workers option should be non-negative"),
        ({"prefetch_factor": 2}, ValueError, "prefetch_factor option could only be specified"),
        ({"prefetch_factor": -1, "num_workers": 1}, ValueError, "prefetch_factor option should"),
        ({"persistent_workers": True}, ValueError, "persistent_workers option needs num_workers"),
        ({"worker_init_fn": print}, ValueError, "worker_init_fn cannot be honoured"),
        ({"multiprocessing_context": "spawn"}, ValueError, "multiprocessing_context cannot be"),
        ({"shuffle": 1}, TypeError, "shuffle must be a bool but got int"),
        ({"sampler": [3, 1, 2]}, ValueError, "sampler must be None or torch's SequentialSampler"),
        ({"batch_sampler": [[0, 1]]}, ValueError, "batch_sampler must be an aioloader sampler"),
        ({"generator": 5}, TypeError, "generator must be a torch.Generator"),
        ({"collate_fn": 5}, TypeError, "collate_fn must be callable or None but got int"),
    ],
)
def test_what_torch_refuses_or_cannot_be_honoured_is_refused(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    data = list(range(8))
    stand_ins = {"S": tud.SequentialSampler(data), "B": ShuffledSampler(8, 2)}
    arguments = {
        key: stand_ins[value] if value in ("S", "B") else value for key, value in options.items()
    }
    with pytest.raises(error, match=re.escape(message)):
        loader_of(data, **arguments)


def test_a_random_sampler_with_replacement_is_refused_with_the_way_out() -> None:
    data = list(range(8))
    with pytest.raises(ValueError, match=r"replacement=True, num_samples=8.*weighted sampler"):
        loader_of(data, sampler=tud.RandomSampler(data, replacement=True))


def test_an_iterable_dataset_is_pointed_to_stream() -> None:
    class Numbers(tud.IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(3))

    with pytest.raises(TypeError, match="IterableDataset Numbers: read a stream with aioloader"):
        loader_of(Numbers(), batch_size=2)


def test_the_sampler_form_defaults_the_torch_form_compares_with_are_the_loaders() -> None:
    import inspect

    from aioloader.engine._torch_form import SAMPLER_FORM_DEFAULTS

    parameters = inspect.signature(DataLoader.__init__).parameters
    assert {name: parameters[name].default for name in SAMPLER_FORM_DEFAULTS} == dict(
        SAMPLER_FORM_DEFAULTS
    )


def test_an_empty_epoch_serves_nothing_and_checkpoints() -> None:
    loader = loader_of(list(range(2)), batch_size=3, drop_last=True)
    assert (len(loader), list(loader), list(loader)) == (0, [], [])
    state = loader.state_dict()
    again = loader_of(list(range(2)), batch_size=3, drop_last=True)
    again.load_state_dict(state)
    assert list(again) == []


def test_torch_weighted_random_sampler_is_translated() -> None:
    dataset = list(range(6))
    weights = torch.tensor([0.0, 1.0, 0.0, 2.0, 0.0, 1.0])
    for replacement in (True, False):
        # torch's annotation says Sequence[float]; its documentation and code take a tensor
        torch_sampler: Any = tud.WeightedRandomSampler(
            weights,  # type: ignore[arg-type]
            3,
            replacement=replacement,
        )
        loader = loader_of(dataset, batch_size=2, sampler=torch_sampler, seed=4)
        assert isinstance(loader.sampler, WeightedRandomSampler)
        drawn = epoch_of(loader)
        assert [len(batch) for batch in drawn] == [2, 1]
        assert set(itertools.chain(*drawn)) <= {1, 3, 5}
        if not replacement:
            assert sorted(itertools.chain(*drawn)) == [1, 3, 5]
