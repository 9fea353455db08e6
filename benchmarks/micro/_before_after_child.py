"""A child of ``before_after``: its revision's aioloader (pinned by the parent's
``sitecustomize``), this tree's workload code. ``python -m benchmarks.micro._before_after_child
SPEC_JSON``: the check (every row's batch digests) or one round (each row's kept value)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import pickle
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import harness

W6_CHECK_STEPS = 3  # W6 batches digested per row before timing


def update(sha: Any, arrays: dict[str, Any]) -> None:
    """Feed a batch's arrays (by name: dtype, shape, bytes) into the hash ``sha``."""
    import numpy as np

    for name in sorted(arrays):
        array = np.ascontiguousarray(np.asarray(arrays[name]))
        sha.update(f"{name} {array.dtype} {array.shape}".encode())
        sha.update(array.tobytes())


def configs(quick: bool) -> dict[str, Any]:
    """W1's and W1u's configurations (``quick``: tiny sizes, as ``run.py --quick``)."""
    from workloads import w1_images, w1u_user_code

    if not quick:
        return {"W1": w1_images.W1Config(), "W1U": w1u_user_code.W1uConfig()}
    tiny = harness.Timing(warm=2, count=8, verify=9)
    return {
        "W1": w1_images.W1Config(images=256, batch=32, warm=2, count=8, verify=9),
        "W1U": w1u_user_code.W1uConfig(images=512, batch=32, timing=tiny),
    }


def make_data(workloads: Sequence[str], quick: bool) -> dict[str, list[Any]]:
    """W1's samples as ``(image, target, label)`` and W1u's images: plain arrays, made once."""
    from workloads import w1_images, w1u_user_code

    from aioloader.datasets import line_images

    cfgs, data = configs(quick), dict[str, list[Any]]()
    if "W1" in workloads:
        samples = w1_images.make_samples(cfgs["W1"])
        data["W1"] = [(s.image, s.target, s.label) for s in samples]
    if "W1U" in workloads:
        found = line_images(cfgs["W1U"].images, seed=w1u_user_code.SEED)._samples
        data["W1U"] = [sample.image for sample in found]
    return data


def in_memory_rows(quick: bool, data: dict[str, list[Any]], log: harness.Log) -> dict[str, Any]:
    """``{workload: (ports, arrays, timing)}``: the aioloader rows of W1 and W1u on ``data``."""
    from workloads import w1_images, w1u_user_code

    from aioloader.core import ImageSample

    cfgs, out = configs(quick), {}
    if "W1" in data:
        cfg, samples = cfgs["W1"], [ImageSample(*sample) for sample in data["W1"]]
        ports = w1_images.rows(cfg, samples, log)
        timing = harness.Timing(cfg.warm, cfg.count, cfg.verify)
        out["W1"] = (ports, harness.fields(w1_images.FIELDS), timing)
    if "W1U" in data:
        cfg = cfgs["W1U"]
        ports = w1u_user_code.rows(cfg, data["W1U"], log)
        out["W1U"] = (ports, lambda batch: {"batch": batch}, cfg.timing)
    return {
        name: ([p for p in ports if p.group == "aioloader"], arrays, timing)
        for name, (ports, arrays, timing) in out.items()
    }


def digest_rows(workload: str, ports: Sequence[Any], steps: int, arrays: Any, log: Any) -> str:
    """``harness.verify`` of ``ports`` (the same batches, bit for bit) and the digest of the
    first port's batches of steps ``[0, steps)``, the reference the others matched."""
    sha, calls = hashlib.sha256(), [0]

    def seen(batch: Any) -> dict[str, Any]:
        found = dict(arrays(batch))
        if calls[0] < steps:  # verify reads the first port first
            update(sha, found)
        calls[0] += 1
        return found

    harness.verify(workload, ports, steps, seen, log)
    return sha.hexdigest()


async def w6_digest(spec: dict[str, Any], steps: int) -> str:
    """The digest of W6 row ``spec``'s batches of steps ``[0, steps)``."""
    from workloads import w6_object_storage

    _, loader = w6_object_storage.aioloader_parts(spec)
    sha = hashlib.sha256()
    async with loader.stream(0, steps) as stream:
        async for batch in stream:
            update(sha, batch)
    return sha.hexdigest()


def load_kernels() -> str:
    """Load the compiled kernels (either revision's module) before any row: which ran."""
    selection: Any = None
    for name in ("aioloader.kernels._selection", "aioloader.core._backend"):  # after, before
        with contextlib.suppress(ImportError):
            selection = importlib.import_module(name)
            break
    if selection is None:
        raise ImportError("neither aioloader.kernels._selection nor aioloader.core._backend")
    if selection.chosen() == "numpy" or selection.load() is None:
        return "numpy"
    return "numba"


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """In a child: the check (digests) or one round (each row's kept value) of ``spec``."""
    from systems import aioloader as aioloader_system

    import aioloader

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    result: dict[str, Any] = {"aioloader": aioloader.__file__, "kernels": load_kernels()}
    data = pickle.loads(Path(spec["data"]).read_bytes())
    rows = in_memory_rows(spec["quick"], data, log)
    if spec["check"]:
        digests = {
            name: digest_rows(name, ports, timing.verify, arrays, log)
            for name, (ports, arrays, timing) in rows.items()
        }
        for name, w6_spec in spec["w6"].items():
            run = functools.partial(w6_digest, w6_spec, W6_CHECK_STEPS)
            digests[f"W6 {name}"] = aioloader_system.run_async(run)
        return {**result, "digests": digests}
    cases = [
        harness.port_case(name, port, "batches/s", timing.warm, timing.count)
        for name, (ports, _, timing) in rows.items()
        for port in ports
    ]
    seconds = {id(case): _timed(case) for case in cases}
    harness.run_interleaved(cases, 1, log)
    result["rows"] = [
        [
            c.workload,
            c.system,
            c.metric,
            c.values[0] if c.values else None,
            c.error,
            seconds[id(c)][0],
        ]
        for c in cases
    ]
    return result


def _timed(case: harness.Case) -> list[float]:
    """Wrap ``case.measure`` to add its seconds (warm-up included) to the list returned."""
    spent, measure = [0.0], case.measure

    def timed() -> float:
        started = time.perf_counter()
        try:
            return measure()
        finally:
            spent[0] += time.perf_counter() - started

    case.measure = timed
    return spent


if __name__ == "__main__":
    harness.child_main(child)
