"""Real multi-process data parallelism: torch.distributed (gloo) ranks, each with a RankSlice.

The test spawns ``world_size`` interpreters running this file as a script. Each joins a gloo
process group (rendezvous through a file in a temporary folder), reads its slice of every
global batch through an aioloader ``DataLoader`` (``iter_sync``), and all_gathers the indices
of every step, as a trainer all-reduces gradients. Each rank writes what it saw to a JSON
file; the test compares the gathered global batches with the global sampler.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from aioloader.core import ShuffledSampler, plan_batch
from aioloader.engine import DataLoader
from aioloader.interop._ranks import rank_slice, resolve_rank
from aioloader.testing import MemoryDataset, StackCollator

pytestmark = pytest.mark.slow  # two and four interpreters with torch.distributed

ROOT = Path(__file__).resolve().parents[2]
SEED = 31337
N = 100
BATCH = 8  # 13 steps per epoch; the last global batch holds 4 (divisible by 2 and 4 ranks)
STEPS = 13
RANK_TIMEOUT = 300.0  # seconds for a whole group, start-up included (a hang guard only)


def _samples() -> list[npt.NDArray[np.int64]]:
    return [np.array([i, 1000 + i], dtype=np.int64) for i in range(N)]


def _global_sampler() -> ShuffledSampler:
    return ShuffledSampler(N, BATCH, drop_last=False)


# -- one rank (runs in a child process) -----------------------------------------------------


def _run_rank(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from_env = resolve_rank()  # RANK / WORLD_SIZE set by the test
    dist.init_process_group(
        "gloo",
        init_method=f"file://{config['store']}",
        rank=from_env.rank,
        world_size=from_env.world_size,
        timeout=timedelta(seconds=RANK_TIMEOUT),
    )
    try:
        rank, world_size = resolve_rank()  # now from the process group
        samples = _samples()
        loader = DataLoader(
            MemoryDataset(samples),
            rank_slice(_global_sampler()),
            StackCollator(),
            seed=SEED,
            workers=1,
            prefetch=4,
        )
        if config["state"] is not None:
            loader.load_state_dict(config["state"])
        steps: list[int] = []
        local_indices: list[list[int]] = []
        gathered: list[list[list[int]]] = []
        data_ok = True
        for _ in range(config["epochs"]):
            for batch in loader:  # the rest of the cursor's epoch, through the sync facade
                local = torch.from_numpy(batch.indices)
                parts = [torch.empty_like(local) for _ in range(world_size)]
                dist.all_gather(parts, local)
                local_indices.append(batch.indices.tolist())
                gathered.append([part.tolist() for part in parts])
                steps.append(batch.global_step)
                expected = np.stack([samples[i] for i in batch.indices.tolist()])
                data_ok = data_ok and np.array_equal(batch.data, expected)
                if loader.next_step == config["stop_at"]:
                    break
        summary = torch.tensor([len(steps), loader.next_step], dtype=torch.int64)
        summaries = [torch.empty_like(summary) for _ in range(world_size)]
        dist.all_gather(summaries, summary)
        result = {
            "rank": rank,
            "world_size": world_size,
            "env": list(from_env),
            "steps": steps,
            "local": local_indices,
            "gathered": gathered,
            "summaries": [s.tolist() for s in summaries],
            "state": loader.state_dict(),
            "data_ok": data_ok,
        }
        Path(config["out"]).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


# -- the test side ------------------------------------------------------------------------


def _launch(
    tmp_path: Path,
    tag: str,
    world_size: int,
    *,
    epochs: int,
    stop_at: int | None = None,
    state: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Run ``world_size`` ranks to completion (bounded in time); their results by rank."""
    folder = tmp_path / tag
    folder.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env["MASTER_ADDR"] = "127.0.0.1"
    env.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
    processes = []
    for rank in range(world_size):
        config = {
            "store": str(folder / "store"),
            "out": str(folder / f"rank{rank}.json"),
            "epochs": epochs,
            "stop_at": stop_at,
            "state": state,
        }
        log = (folder / f"rank{rank}.log").open("w")
        process = subprocess.Popen(
            [sys.executable, __file__, json.dumps(config)],
            cwd=ROOT,
            env={**env, "RANK": str(rank), "WORLD_SIZE": str(world_size)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        processes.append(process)
    try:
        codes = [process.wait(timeout=RANK_TIMEOUT) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
    logs = {r: (folder / f"rank{r}.log").read_text() for r in range(world_size)}
    assert codes == [0] * world_size, logs
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(world_size)]


def _check_global_batches(results: list[dict[str, Any]], first_step: int, count: int) -> None:
    world_size = len(results)
    sampler = _global_sampler()
    expected_steps = list(range(first_step, first_step + count))
    for rank, result in enumerate(results):
        assert (result["rank"], result["world_size"]) == (rank, world_size)
        assert result["env"] == [rank, world_size]
        assert result["steps"] == expected_steps
        assert result["data_ok"] is True
        # Every rank stops at the same step.
        assert result["summaries"] == [[count, first_step + count]] * world_size
        state = result["state"]
        assert (state["version"], state["seed"], state["next_step"]) == (
            3,
            SEED,
            first_step + count,
        )
        # Global-batch sharding: the fingerprint names the global sampler, not the rank.
        assert state["stream"] == f"{_global_sampler()!r} over a dataset of 100 items"
    # all_gather gives every rank the same view of every step.
    assert all(result["gathered"] == results[0]["gathered"] for result in results)
    for position, (g, parts) in enumerate(zip(expected_steps, results[0]["gathered"], strict=True)):
        assert parts == [result["local"][position] for result in results]
        whole = plan_batch(sampler, SEED, g).indices.tolist()
        sizes = {len(part) for part in parts}
        assert sizes == {len(whole) // world_size}
        flat = [i for part in parts for i in part]
        assert len(set(flat)) == len(flat)  # the slices are disjoint
        assert flat == whole  # and in rank order they are the global batch


def test_two_ranks_share_two_epochs(tmp_path: Path) -> None:
    results = _launch(tmp_path, "two", 2, epochs=2)
    _check_global_batches(results, 0, 2 * STEPS)


def test_four_ranks_share_two_epochs(tmp_path: Path) -> None:
    results = _launch(tmp_path, "four", 4, epochs=2)
    _check_global_batches(results, 0, 2 * STEPS)


def test_elastic_resume_from_four_ranks_on_two(tmp_path: Path) -> None:
    k = 9  # mid-epoch 0
    first = _launch(tmp_path, "before", 4, epochs=1, stop_at=k)
    _check_global_batches(first, 0, k)
    states = [result["state"] for result in first]
    assert [(s["version"], s["seed"], s["next_step"]) for s in states] == [(3, SEED, k)] * 4
    assert len({s["fingerprint"] for s in states}) == 1
    # Resume on 2 ranks: the rest of epoch 0, then epoch 1.
    second = _launch(tmp_path, "after", 2, epochs=2, state=states[0])
    _check_global_batches(second, k, 2 * STEPS - k)


if __name__ == "__main__":
    _run_rank(json.loads(sys.argv[1]))
