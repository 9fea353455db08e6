"""aioloader.engine._state: the fingerprint of a stream, and the checks of a saved state."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aioloader.core import (
    BlockShuffledSampler,
    BucketedSampler,
    DistributedSampler,
    MixingSampler,
    PackedSampler,
    RankSlice,
    SequentialSampler,
    ShuffledSampler,
)
from aioloader.engine import DataLoader
from aioloader.testing import MemoryDataset, StackCollator

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("state_child.py")


def make_loader() -> DataLoader[Any, Any]:
    return DataLoader(
        MemoryDataset(list(range(8))), SequentialSampler(8, 2), StackCollator(), seed=3
    )


@pytest.mark.parametrize(
    ("field", "value", "error", "message"),
    [
        (
            "next_step",
            -5,
            ValueError,
            r"state\['next_step'\] must be an integer in \[0, 2\^64\) but got -5",
        ),
        (
            "next_step",
            "4",
            TypeError,
            r"state\['next_step'\] must be an integer but got str \('4'\)",
        ),
        ("next_step", 2.0, TypeError, r"state\['next_step'\] must be an integer but got float"),
        ("next_step", True, TypeError, r"state\['next_step'\] must be an integer but got a bool"),
        ("seed", -1, ValueError, r"state\['seed'\] must be an integer in \[0, 2\^64\) but got -1"),
        ("version", 99, ValueError, r"state\['version'\] must be 1, 2 or 3 .* but got 99"),
        ("version", True, ValueError, r"state\['version'\] must be 1, 2 or 3 .* but got True"),
        ("fingerprint", None, TypeError, r"state\['fingerprint'\] must be the str .* NoneType"),
    ],
)
def test_a_bad_field_is_named_before_the_fingerprint(
    field: str, value: Any, error: type[Exception], message: str
) -> None:
    saved = {**make_loader().state_dict(), "fingerprint": "not this stream", field: value}
    loader = make_loader()
    with pytest.raises(error, match=message):
        loader.load_state_dict(saved)
    assert loader.next_step == 0


def test_a_good_state_still_resumes_and_a_foreign_one_names_the_fingerprint() -> None:
    loader = make_loader()
    loader.load_state_dict({**loader.state_dict(), "next_step": 5})
    assert loader.next_step == 5
    with pytest.raises(ValueError, match=r"state\['fingerprint'\] must match this loader's stream"):
        loader.load_state_dict({**loader.state_dict(), "fingerprint": "0" * 16})


# -- the fingerprint: explicit fields, the same in every process ------------------------
class Halves:
    """A sampler of the user's own: first half, then second half; default repr."""

    def __init__(self, n: int, fields: Any = None) -> None:
        self.n, self.fields = n, fields

    @property
    def steps_per_epoch(self) -> int:
        return 2

    def indices(self, seed: int, epoch: int, step: int) -> Any:
        half = self.n // 2
        return np.arange(step * half, (step + 1) * half, dtype=np.int64)


class DeclaredHalves(Halves):
    def fingerprint_fields(self) -> Any:
        return self.fields


def loader_of(sampler: Any, n: int = 8) -> DataLoader[Any, Any]:
    return DataLoader(MemoryDataset(list(range(n))), sampler, StackCollator(), seed=3)


BUILT_IN: dict[str, Any] = {
    "sequential": SequentialSampler(8, 2),
    "shuffled": ShuffledSampler(8, 3, drop_last=False),
    "mixing": MixingSampler([4, 4], [0.25, 0.75], 2),
    "bucketed": BucketedSampler([5, 1, 4, 2, 8, 3, 7, 6], 2, 2),
    "block": BlockShuffledSampler([3, 5], 2, window=1),
    "packed": PackedSampler([5, 1, 4, 2, 8, 3, 7, 6], 8, 2),
    "distributed": DistributedSampler(8, 2, 1, 2, shuffle=True),
    "rank slice": RankSlice(SequentialSampler(8, 2), 1, 2),
}


@pytest.mark.parametrize(
    ("name", "fingerprint"),
    [
        ("sequential", "9af276d7bd2a4240"),
        ("shuffled", "8a5cabcc1ab84137"),
        ("mixing", "6b9fa2786b265bc9"),
        ("bucketed", "a39f6f86c95c32e9"),
        ("block", "a752e9353aa1ba05"),
        ("packed", "da8ef48fcdd9a187"),
        ("distributed", "148ae1563d1afc72"),
        ("rank slice", "9af276d7bd2a4240"),  # the global sampler's: any world size resumes
    ],
)
def test_the_fingerprints_of_the_built_in_samplers_are_pinned(name: str, fingerprint: str) -> None:
    state = loader_of(BUILT_IN[name]).state_dict()
    assert (state["version"], state["fingerprint"]) == (3, fingerprint)


def test_the_fingerprint_hashes_the_kind_the_fields_the_length_and_the_seed() -> None:
    identity = (
        '{"dataset_length":8,"sampler":{"fields":{"batch_size":2,"drop_last":true,"n":8},'
        '"kind":"SequentialSampler"},"seed":3}'
    )
    expected = hashlib.sha256(identity.encode()).hexdigest()[:16]
    assert loader_of(SequentialSampler(8, 2)).state_dict()["fingerprint"] == expected


def test_a_changed_repr_leaves_the_fingerprint_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    saved = loader_of(SequentialSampler(8, 2)).state_dict()
    monkeypatch.setattr(SequentialSampler, "__repr__", lambda self: "renamed")
    loader = loader_of(SequentialSampler(8, 2))
    assert loader.state_dict()["fingerprint"] == saved["fingerprint"]
    loader.load_state_dict({**saved, "next_step": 3})
    assert loader.next_step == 3


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (BucketedSampler([1, 2, 3, 4], 2, 1), BucketedSampler([4, 3, 2, 1], 2, 1)),
        (PackedSampler([3, 5, 2, 6], 8, 1), PackedSampler([3, 5, 2, 6], 8, 1, drop_last=True)),
    ],
)
def test_every_field_that_decides_the_stream_is_in_the_fingerprint(first: Any, second: Any) -> None:
    """Bucketed by its lengths, not only their count; packed by drop_last too."""
    state = loader_of(first).state_dict()
    with pytest.raises(ValueError, match=r"state\['fingerprint'\] must match"):
        loader_of(second).load_state_dict(state)


def test_a_custom_sampler_resumes_in_another_process(tmp_path: Path) -> None:
    """Saved by one interpreter, loaded by another: no memory address in the fingerprint."""
    state = tmp_path / "state.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for command in ("save", "load"):
        done = subprocess.run(
            [sys.executable, str(CHILD), command, str(state)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [3, [7, 9, 11]]
    assert json.loads(state.read_text())["next_step"] == 3


def test_a_custom_sampler_with_equal_fields_resumes_and_other_fields_are_refused() -> None:
    saved = loader_of(DeclaredHalves(8, {"n": 8})).state_dict()
    resumed = loader_of(DeclaredHalves(8, {"n": 8}))
    resumed.load_state_dict(saved)
    assert resumed.next_step == 0
    with pytest.raises(ValueError, match=r"state\['fingerprint'\] must match"):
        loader_of(DeclaredHalves(8, {"n": 9})).load_state_dict(saved)


def test_a_sampler_without_the_hook_is_named_with_the_method_to_define() -> None:
    loader = loader_of(Halves(8))
    message = r"^sampler must define fingerprint_fields\(\) to be saved or resumed but Halves"
    with pytest.raises(TypeError, match=message):
        loader.state_dict()
    state = {"version": 3, "seed": 3, "next_step": 1, "fingerprint": "0" * 16}
    with pytest.raises(TypeError, match=message):
        loader.load_state_dict(state)
    loader.load_state_dict(state, check_stream=False)  # a deliberate resume needs no hook
    assert loader.next_step == 1


@pytest.mark.parametrize("fields", [{"lengths": np.arange(3)}, {"share": float("nan")}, {1, 2}])
def test_fields_that_are_not_json_are_refused(fields: Any) -> None:
    with pytest.raises(TypeError, match=r"^DeclaredHalves.fingerprint_fields\(\) must return JSON"):
        loader_of(DeclaredHalves(8, fields)).state_dict()


def test_a_version_2_state_is_checked_by_the_fingerprint_it_was_written_with() -> None:
    """Version 2 hashed the description (the sampler's repr) and the seed."""
    stream = "SequentialSampler(n=8, batch_size=2, drop_last=True) over a dataset of 8 items"
    old = hashlib.sha256(f"{stream}\0{3}".encode()).hexdigest()[:16]
    state = {"version": 2, "seed": 3, "next_step": 2, "fingerprint": old, "stream": stream}
    loader = loader_of(SequentialSampler(8, 2))
    loader.load_state_dict(state)
    assert loader.next_step == 2
    with pytest.raises(ValueError, match=r"a version-2 state: its fingerprint hashed repr"):
        loader_of(SequentialSampler(8, 4)).load_state_dict(state)
