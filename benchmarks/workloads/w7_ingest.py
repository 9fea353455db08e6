"""W7: web ingestion, 10,000 URLs of JPEGs to WebDataset shards: aioloader vs img2dataset.

The image server (``tests/_support/image_server.py``, +50 ms, 2 % faults) on loopback, the
same URL list and the same resize work for both systems, each run a fresh child process
(``python benchmarks/workloads/w7_ingest.py child ...``) checked URL by URL against the
server's fate table. docs/benchmarks.md (W7) gives the settings, sweeps and checks.

img2dataset is found in the venv or, installed apart with ``pip install --no-deps --target
DIR`` (docs/benchmarks.md, W7, lists what else goes in), through ``--peer-path DIR`` or
``$AIOLOADER_BENCH_PEERS``, appended to ``sys.path`` here and in every child. Targets (issue
22): aioloader in one process >= 1.5x img2dataset's best configuration (images/s); the
two-process row is reported beside it, as information.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
for _path in (HERE.parent, HERE.parents[1]):  # harness, systems; tests._support (the child)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import harness  # noqa: E402
from harness import Case  # noqa: E402
from systems import img2dataset  # noqa: E402

harness.use_peer_paths()  # $AIOLOADER_BENCH_PEERS, set by run.py --peer-path (the children)

SINGLE_PREFIX = "aioloader ingest, one process: "
SPLIT_PREFIX = "aioloader ingest, split: "
EXPECTED_REASON = {
    "missing": "HTTP 404",
    "unavailable": "HTTP 503",
    "reset": "reset",
    "stalled": "timeout",
}


@dataclasses.dataclass(frozen=True)
class W7Config:
    """Sizes and each system's settings."""

    urls: int = 10_000
    size: int = 256
    quality: int = 95
    timeout: float = 2.0
    shard_samples: int = 5000
    i2d_processes: int = 2
    i2d_threads: int = 64
    in_flight: int = 64
    threads: int = 2
    processes: int = 2  # the second aioloader row: one ingest per process, merged
    checked_images: int = 100


def available(log: Callable[[str], None]) -> bool:
    """Whether W7 can run here: img2dataset, webdataset, aiohttp and Pillow."""
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no version check over the network
    return harness.can_run("W7", ("aiohttp", "img2dataset", "PIL", "webdataset"), log)


# -- the child processes ------------------------------------------------------------------
def _child_aioloader(spec: dict[str, Any]) -> dict[str, Any]:
    import anyio

    from aioloader.ingest import ImageOptions, IngestSummary, ingest
    from aioloader.sources import HttpFetcher, RetryPolicy

    image = ImageOptions(
        size=spec["size"], resize_mode="center_crop", quality=spec["quality"], reduced_decode=False
    )

    async def run() -> IngestSummary:
        async with HttpFetcher(
            max_in_flight=spec["in_flight"],
            max_per_host=spec["in_flight"],
            connect_timeout=spec["timeout"],
            read_timeout=spec["timeout"],
            retry=RetryPolicy(max_attempts=1),
            allow=["127.0.0.1"],
        ) as fetcher:
            return await ingest(
                spec["url_file"],
                spec["output"],
                image=image,
                fetcher=fetcher,
                threads=spec["threads"],
                shard_samples=spec["shard_samples"],
                start=spec.get("start", 0),
                stop=spec.get("stop"),
            )

    started = time.perf_counter()
    summary = anyio.run(run, backend="asyncio", backend_options={"use_uvloop": True})
    return {"seconds": time.perf_counter() - started, "ok": summary.ok}


def _child_aioloader_processes(spec: dict[str, Any]) -> dict[str, Any]:
    """The input cut in halves, one spawned process each, then ``merge_parts``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from aioloader.ingest import count_inputs, merge_parts, part_name

    started = time.perf_counter()
    count, processes = count_inputs(spec["url_file"]), int(spec["processes"])
    parts = [part_name(i) for i in range(processes)]
    specs = [
        {
            **spec,
            "output": os.path.join(spec["output"], parts[i]),
            "start": count * i // processes,
            "stop": count * (i + 1) // processes,
        }
        for i in range(processes)
    ]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        list(pool.map(_child_aioloader, specs))
    merge_parts(spec["output"], parts, inputs=count)
    return {"seconds": time.perf_counter() - started}


def child_main(argv: list[str]) -> None:
    """``child <system> <spec json>``: run one ingestion, print its timing as JSON."""
    system, spec = argv[0], json.loads(argv[1])
    run = {
        "img2dataset": img2dataset.ingest,
        "aioloader": _child_aioloader,
        "aioloader-processes": _child_aioloader_processes,
    }[system]
    result = run(spec)
    print("W7RESULT " + json.dumps(result), flush=True)


# -- reading the outputs back ---------------------------------------------------------------
def _aioloader_outcome(folder: Path, urls: list[str]) -> tuple[dict[str, str], list[Path]]:
    """URL -> "ok" or failure reason, and the shard paths, from the manifest.

    Every input position a committed shard covers is a sample unless a failure record
    names it (the manifest's exactly-once rule); the keys are the positions.
    """
    from aioloader.sinks import read_failures, read_manifest

    manifest = read_manifest(folder)
    outcome: dict[str, str] = {}
    for record in manifest.shards:
        for position in range(record.first or 0, record.end or 0):
            outcome[urls[position]] = "ok"
    for failure in read_failures(folder):
        url = urls[failure.position or 0]
        if failure.reason == "status":
            outcome[url] = failure.detail
        elif failure.reason == "connection":
            outcome[url] = "reset"
        else:
            outcome[url] = failure.reason
    return outcome, [folder / name for name in manifest.names]


def _tar_samples(paths: list[Path]) -> list[dict[str, Any]]:
    import anyio

    from aioloader.sources import TarShards

    with tempfile.TemporaryDirectory(prefix="w7-index-") as index_dir:
        shards: TarShards[Any] = TarShards([str(p) for p in paths], index_dir=index_dir)

        async def read() -> list[dict[str, Any]]:
            return await shards.get_samples(range(len(shards)))

        return anyio.run(read)


def _expected(urls: list[str]) -> dict[str, str]:
    from tests._support.image_server import fate

    out = {}
    for url in urls:
        kind = fate(urlsplit(url).path)
        out[url] = EXPECTED_REASON.get(kind, "ok")
    return out


def _count_webdataset(paths: list[Path]) -> int:
    import webdataset as wds

    dataset = wds.WebDataset([str(p) for p in paths], shardshuffle=False, empty_check=False)
    return sum(1 for sample in dataset if "jpg" in sample)


def _images(samples: list[dict[str, Any]], urls: set[str]) -> dict[str, Any]:
    """URL -> decoded image (numpy) of the samples whose URL is in ``urls``."""
    import numpy as np
    from PIL import Image

    out = {}
    for sample in samples:
        url = json.loads(sample["json"])["url"]
        if url in urls:
            out[url] = np.asarray(Image.open(io.BytesIO(sample["jpg"])).convert("RGB"))
    return out


# -- the two systems -------------------------------------------------------------------------
class _System:
    """One system's runs: a child process per run, its output checked, its numbers kept."""

    def __init__(
        self, name: str, spec: dict[str, Any], workdir: Path, expected: dict[str, str]
    ) -> None:
        self.name = name
        self.urls = list(expected)
        self.spec = spec
        self.workdir = workdir
        self.expected = expected
        self.runs = 0
        self.facts: dict[str, Any] = {}
        self.cpu: list[float] = []
        self.images: dict[str, Any] = {}
        self.checked = False

    def measure(self) -> float:
        output = self.workdir / f"{self.name}-{self.runs}"
        self.runs += 1
        spec = {**self.spec, "output": str(output)}
        command = [sys.executable, str(HERE / "w7_ingest.py"), "child", self.name, json.dumps(spec)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=900, cwd=HERE.parents[1]
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        lines = [x for x in done.stdout.splitlines() if x.startswith("W7RESULT ")]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"{self.name} failed ({done.returncode}): {done.stderr[-2000:]}")
        seconds = float(json.loads(lines[-1].split(" ", 1)[1])["seconds"])
        if self.name == "img2dataset":
            outcome, paths = img2dataset.outcome(output)  # the merged manifest otherwise
        else:
            outcome, paths = _aioloader_outcome(output, self.urls)
        self._check(outcome)
        successes = sum(v == "ok" for v in outcome.values())
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.cpu.append(cpu / max(1, successes))
        self.facts["CPU ms/image"] = round(1e3 * statistics.median(self.cpu), 2)
        if not self.checked:
            self._read_back(paths, successes)
        shutil.rmtree(output, ignore_errors=True)
        return successes / seconds

    def _check(self, outcome: dict[str, str]) -> None:
        if outcome != self.expected:
            wrong = [
                (u, outcome.get(u), e) for u, e in self.expected.items() if outcome.get(u) != e
            ]
            raise AssertionError(
                f"{self.name}: {len(wrong)} URLs differ from the server's fate table "
                f"(url, got, expected): {wrong[:5]}"
            )
        counts = Counter(outcome.values())
        self.facts["successes"] = counts.pop("ok", 0)
        self.facts["failures by reason"] = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))

    def _read_back(self, paths: list[Path], successes: int) -> None:
        self.checked = True
        with_webdataset = _count_webdataset(paths)
        samples = _tar_samples(paths)
        with_tarshards = len(samples)
        if not with_webdataset == with_tarshards == successes:
            raise AssertionError(
                f"{self.name}: webdataset reads {with_webdataset} samples, TarShards "
                f"{with_tarshards}, but {successes} succeeded"
            )
        self.facts["webdataset / TarShards samples"] = f"{with_webdataset:,} / {with_tarshards:,}"
        ok = [url for url, outcome in self.expected.items() if outcome == "ok"]
        step = max(1, len(ok) // int(self.spec["checked_images"]))
        self.images = _images(samples, set(ok[::step]))
        shapes = {image.shape for image in self.images.values()}
        if shapes != {(self.spec["size"], self.spec["size"], 3)}:
            raise AssertionError(f"{self.name}: decoded image shapes {shapes}")


def _compare_images(a: _System, b: _System) -> str:
    """Mean absolute pixel difference over URLs both systems' checked images share."""
    import numpy as np

    common = sorted(set(a.images) & set(b.images))
    if not common:
        return "n/a"
    diffs = [
        float(np.abs(a.images[u].astype(np.int16) - b.images[u].astype(np.int16)).mean())
        for u in common
    ]
    return f"{statistics.mean(diffs):.2f} (max {max(diffs):.2f}, {len(common)} images)"


def cases(cfg: W7Config, log: Callable[[str], None], stack: contextlib.ExitStack) -> list[Case]:
    """Start the image server (stopped by ``stack``), write the URL list, build both rows."""
    from tests._support.image_server import ImageServer, url_list

    server = stack.enter_context(ImageServer())
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="w7-")))
    urls = url_list(server.base, cfg.urls)
    url_file = workdir / "urls.txt"
    url_file.write_text("\n".join(urls) + "\n", encoding="utf-8")
    expected = _expected(urls)
    log(f"  W7: {cfg.urls:,} URLs at {server.base}; {sum(v == 'ok' for v in expected.values()):,} "
        "can succeed")  # fmt: skip
    common = {
        "url_file": str(url_file),
        "size": cfg.size,
        "quality": cfg.quality,
        "timeout": cfg.timeout,
        "shard_samples": cfg.shard_samples,
        "checked_images": cfg.checked_images,
    }
    theirs = _System(
        "img2dataset",
        {**common, "processes": cfg.i2d_processes, "threads": cfg.i2d_threads},
        workdir,
        expected,
    )
    mine = _System(
        "aioloader",
        {**common, "in_flight": cfg.in_flight, "threads": cfg.threads},
        workdir,
        expected,
    )
    split = _System(
        "aioloader-processes",
        {**common, "in_flight": cfg.in_flight // 2, "threads": 1, "processes": cfg.processes},
        workdir,
        expected,
    )
    baseline_name = f"img2dataset 1.47.0: {cfg.i2d_processes} processes x {cfg.i2d_threads} threads"

    def measuring(system: _System) -> Callable[[], float]:
        def measure() -> float:
            value = system.measure()
            key = "pixel |diff| vs img2dataset"
            if theirs.images and system.images and key not in system.facts:
                system.facts[key] = _compare_images(system, theirs)
            return value

        return measure

    return [
        Case(
            workload="W7",
            system=baseline_name,
            metric="images/s",
            measure=theirs.measure,
            baseline=True,
            group="img2dataset",
            note="download(..., output_format='webdataset', resize_mode='center_crop')",
            facts=theirs.facts,
        ),
        Case(
            workload="W7",
            system=f"{SINGLE_PREFIX}{cfg.in_flight} in flight, {cfg.threads} threads",
            metric="images/s",
            measure=measuring(mine),
            group="aioloader",
            note="ingest(image=ImageOptions(256, 'center_crop', reduced_decode=False)), uvloop",
            facts=mine.facts,
        ),
        Case(
            workload="W7",
            system=f"{SPLIT_PREFIX}{cfg.processes} processes x ({cfg.in_flight // 2} in "
            "flight, 1 thread), merge_parts",
            metric="images/s",
            measure=measuring(split),
            group="aioloader",
            note="ingest(start=, stop=) per spawned process into part-0000i/, then merge_parts",
            facts=split.facts,
        ),
    ]


# -- the workload, as run.py crosses it -----------------------------------------------------
NAME = "W7"
OPT_IN = True  # several minutes; img2dataset installed by hand
TITLE = (
    "web ingestion: 10,000 JPEG URLs on loopback (+50 ms, 2 % faults) -> resize 256 "
    "center crop -> WebDataset shards"
)
NOTES = [
    "Images/s: successful images / wall seconds of the ingestion call, each run a fresh "
    "process, both on the same 2 cores (the server too). Every run's successes and "
    "failures are checked URL by URL against the server's fate table; the first run's "
    "shards are read by webdataset and by TarShards. See benchmarks/workloads/w7_ingest.py.",
]


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W7's cases and notes (left out, and said so, without img2dataset and the rest)."""
    cfg = W7Config(urls=400, checked_images=20) if quick else W7Config()
    if not available(log):
        return [], [
            "Left out: img2dataset, webdataset, aiohttp or Pillow is missing (img2dataset "
            "installed with pip --target DIR: --peer-path DIR)."
        ]
    return cases(cfg, log, stack), [*NOTES, f"Settings: {cfg}."]


def targets(found: list[Case]) -> list[dict[str, Any]]:
    """aioloader's ingest (one process; two, as information) against img2dataset."""
    single = harness.best(found, "W7", "aioloader", prefix=SINGLE_PREFIX)
    split = harness.best(found, "W7", "aioloader", prefix=SPLIT_PREFIX)
    if single is None and split is None:
        return []
    theirs = harness.baseline_of(found, "W7")
    out = [
        harness.target(
            "W7: aioloader ingest, one process >= 1.5x img2dataset images/s", single, theirs, 1.5
        )
    ]
    if split is not None:
        row = harness.target(
            "W7 (information): aioloader ingest, 2 processes / img2dataset images/s",
            split,
            theirs,
            1.5,
        )
        out.append({**row, "met": None})
    for row_case in (single, split):
        if row_case is None:
            continue
        same = theirs is not None and row_case.facts.get("successes") == theirs.facts.get(
            "successes"
        )
        out.append(
            harness.fact_target(
                f"W7: same success count ({row_case.system})",
                f"{row_case.facts.get('successes')} vs "
                f"{theirs.facts.get('successes') if theirs else None}",
                same,
            )
        )
    mine = single or split
    if theirs is not None and mine is not None and "CPU ms/image" in theirs.facts:
        a, b = theirs.facts["CPU ms/image"], mine.facts.get("CPU ms/image")
        out.append(
            harness.fact_target(
                f"W7 (information): CPU per image, img2dataset / {mine.system}",
                f"{a / b:.2f}x ({a} vs {b} ms)" if b else "n/a",
                None,
            )
        )
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2:])
