"""The public API in tiers: what loaders are built with at the top, primitives in core.

Changing an export list is an API change: this test makes it a deliberate one.
"""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

import aioloader
import aioloader.core
import aioloader.sources

TOP_LEVEL = (
    "AioloaderError",
    "AutoTune",
    "BatchAugmentation",
    "BatchRng",
    "BatchStream",
    "BatchedDataset",
    "BlockShuffledSampler",
    "BucketedSampler",
    "BufferPool",
    "BufferReleasedError",
    "CacheStatistics",
    "CollateError",
    "Collator",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "GainOffset",
    "GlobalRandomWarning",
    "ImageBatch",
    "ImageBatchCollator",
    "ImageFolder",
    "ImageSample",
    "JpegCropResize",
    "KnownFutureCache",
    "LoaderClosedError",
    "LoaderStatistics",
    "LocalFiles",
    "MalformedShardError",
    "MixingSampler",
    "ObjectNotFoundError",
    "ObjectStore",
    "PackCollator",
    "PackedBatch",
    "PackedSampler",
    "PadCollator",
    "PaddedBatch",
    "PoolStatistics",
    "RankSlice",
    "RetryPolicy",
    "SampleRng",
    "Sampler",
    "SequentialSampler",
    "ShuffledSampler",
    "SourceError",
    "Stream",
    "Subset",
    "SyncDataset",
    "TarShards",
    "TreeBatch",
    "TreeCollator",
    "WeightedRandomSampler",
    "WorkerDiedError",
    "decode_bytes",
    "decode_npy",
    "default_collate",
    "load_kernels",
    "shard_pieces",
    "takes_key",
    "takes_plan",
    "takes_rng",
)

CORE = (
    "BatchAugmentation",
    "BatchField",
    "BatchPlan",
    "BatchRng",
    "BatchState",
    "BlockShuffledSampler",
    "BucketedSampler",
    "BufferPool",
    "DistributedSampler",
    "GainOffset",
    "ImageBatch",
    "ImageBatchCollator",
    "ImageSample",
    "JpegCropResize",
    "MixingSampler",
    "PackCollator",
    "PackedBatch",
    "PackedSampler",
    "PackedSequences",
    "Packing",
    "PadCollator",
    "PaddedBatch",
    "PaddingReport",
    "PoolStatistics",
    "PooledBatch",
    "RankSlice",
    "RngStream",
    "SampleRng",
    "Sampler",
    "SequentialSampler",
    "ShuffledSampler",
    "StepBatch",
    "TreeBatch",
    "TreeCollator",
    "WeightedRandomSampler",
    "batch_normals",
    "batch_sizes_of",
    "crop_resize",
    "default_collate",
    "derive",
    "derive_slots",
    "digest_batch",
    "digest_stream",
    "first_fit_decreasing",
    "gray8_to_planar",
    "keyed_permutation",
    "keyed_permutation_array",
    "load_kernels",
    "mix",
    "mix_array",
    "pack_lengths",
    "pack_sequences",
    "pad_sequences",
    "padding_report",
    "plan_batch",
    "rgb8_to_planar",
    "sampler_identity",
    "shard_pieces",
    "split_global_step",
    "takes_key",
    "takes_plan",
    "takes_rng",
    "values_digest",
    "wants_key",
    "wants_plan",
    "wants_rng",
)

SOURCES = (
    "CacheStatistics",
    "ConcatDataset",
    "FAILURE_REASONS",
    "FetchResult",
    "HttpFetchError",
    "HttpFetcher",
    "HttpNotFoundError",
    "HttpSource",
    "HttpStatistics",
    "IMAGE_EXTENSIONS",
    "ImageFolder",
    "KnownFutureCache",
    "LabeledImage",
    "LocalFiles",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreStatistics",
    "RetryPolicy",
    "Stream",
    "Subset",
    "TarSample",
    "TarShards",
    "decode_bytes",
    "decode_npy",
    "decode_tar_sample",
)

MODULES = [(aioloader, TOP_LEVEL), (aioloader.core, CORE), (aioloader.sources, SOURCES)]


@pytest.mark.parametrize(("module", "expected"), MODULES, ids=lambda m: getattr(m, "__name__", ""))
def test_export_list_is_pinned(module: ModuleType, expected: tuple[str, ...]) -> None:
    assert expected == module.__all__


@pytest.mark.parametrize(("module", "expected"), MODULES, ids=lambda m: getattr(m, "__name__", ""))
def test_export_list_is_a_sorted_tuple_of_existing_names(
    module: ModuleType, expected: tuple[str, ...]
) -> None:
    assert isinstance(module.__all__, tuple)
    assert list(module.__all__) == sorted(module.__all__)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []
    assert set(module.__all__) <= set(dir(module))


def test_primitives_are_not_at_the_top_level() -> None:
    primitives = {"mix", "derive", "derive_slots", "keyed_permutation", "plan_batch"}
    primitives |= {"BatchPlan", "split_global_step", "digest_batch", "pack_lengths"}
    primitives |= {"first_fit_decreasing", "gray8_to_planar", "rgb8_to_planar", "RngStream"}
    assert primitives <= set(CORE)
    assert primitives & set(TOP_LEVEL) == set()
    for name in sorted(primitives):
        with pytest.raises(AttributeError, match=name):
            getattr(aioloader, name)


def test_top_level_names_are_the_same_objects_as_below() -> None:
    for name in TOP_LEVEL:
        value = getattr(aioloader, name)
        for module in (aioloader.core, aioloader.sources):
            if name in module.__all__:
                assert getattr(module, name) is value


def test_importing_aioloader_loads_no_optional_io_package() -> None:
    code = (
        "import sys, aioloader\n"
        "heavy = ('obstore', 'aiofiles', 'uvloop')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
        "aioloader.ObjectStore, aioloader.LocalFiles\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in heavy}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.splitlines() == ["[]", "['obstore']"]
