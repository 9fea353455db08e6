"""W7: web ingestion, 10,000 URLs of JPEGs to WebDataset shards: aioloader vs img2dataset.

docs/benchmarks.md (W7) gives the server, the settings, the checks and how to install
img2dataset apart (``--peer-path DIR``). Each run is a fresh child process:
``python benchmarks/workloads/w7_ingest.py child SYSTEM SPEC_JSON``.
"""

from __future__ import annotations

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

NAME = "W7"
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

harness.use_peer_paths()  # $AIOLOADER_BENCH_PEERS, set by run.py --peer-path (the children)

SINGLE_PREFIX = "aioloader ingest, one process: "
SPLIT_PREFIX = "aioloader ingest, split: "
REASONS = {"missing": "HTTP 404", "unavailable": "HTTP 503", "reset": "reset", "stalled": "timeout"}
PIXEL_DIFF = "pixel |diff| vs img2dataset"


@dataclasses.dataclass(frozen=True)
class W7Config:
    """Sizes and settings: ``i2d_*`` img2dataset's, the rest aioloader's."""

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


# -- in the child process -------------------------------------------------------------------
def _ingest(spec: dict[str, Any]) -> dict[str, Any]:
    """aioloader's ``ingest`` of the URL list (its ``start:stop`` part) on uvloop."""
    import anyio

    from aioloader.ingest import ImageOptions, ingest
    from aioloader.sources import HttpFetcher, RetryPolicy

    image = ImageOptions(size=spec["size"], resize_mode="center_crop", quality=spec["quality"],
                         reduced_decode=False)  # fmt: skip

    fetcher = HttpFetcher(max_in_flight=spec["in_flight"], max_per_host=spec["in_flight"],
                          connect_timeout=spec["timeout"], read_timeout=spec["timeout"],
                          retry=RetryPolicy(max_attempts=1), allow=["127.0.0.1"])  # fmt: skip

    async def run() -> Any:
        async with fetcher:
            return await ingest(spec["url_file"], spec["output"], image=image, fetcher=fetcher,
                                threads=spec["threads"], shard_samples=spec["shard_samples"],
                                start=spec.get("start", 0), stop=spec.get("stop"))  # fmt: skip

    started = time.perf_counter()
    summary = anyio.run(run, backend="asyncio", backend_options={"use_uvloop": True})
    return {"seconds": time.perf_counter() - started, "ok": summary.ok}


def _ingest_split(spec: dict[str, Any]) -> dict[str, Any]:
    """The list cut in equal parts, ``_ingest`` in a spawned process each, ``merge_parts``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from aioloader.ingest import count_inputs, merge_parts, part_name

    started = time.perf_counter()
    count, processes = count_inputs(spec["url_file"]), int(spec["processes"])
    parts = [part_name(i) for i in range(processes)]
    specs = [{**spec, "output": os.path.join(spec["output"], part), "start": count * i // processes,
              "stop": count * (i + 1) // processes} for i, part in enumerate(parts)]  # fmt: skip
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_ingest, specs))
    merge_parts(spec["output"], parts, inputs=count)
    return {"seconds": time.perf_counter() - started}


# -- in the parent: each system's runs, checked --------------------------------------------
def _aioloader_outcome(folder: Path, urls: list[str]) -> tuple[dict[str, str], list[Path]]:
    """URL -> "ok" or failure reason, and the shards: every position a committed shard
    covers is a sample unless a failure record names it (the manifest's exactly-once rule)."""
    from aioloader.sinks import read_failures, read_manifest

    manifest = read_manifest(folder)
    outcome = {urls[n]: "ok" for r in manifest.shards for n in range(r.first or 0, r.end or 0)}
    for failure in read_failures(folder):
        reason = {"status": failure.detail, "connection": "reset"}.get(failure.reason)
        outcome[urls[failure.position or 0]] = reason or failure.reason
    return outcome, [folder / name for name in manifest.names]


class _System:
    """One system's runs: a child process per run, its output checked, its numbers kept."""

    def __init__(self, name: str, spec: dict[str, Any], expected: dict[str, str],
                 against: _System | None = None) -> None:  # fmt: skip
        self.name, self.spec, self.expected = name, spec, expected
        self.against = against  # the system whose decoded images this one's are compared with
        self.runs = 0
        self.facts: dict[str, Any] = {}
        self.cpu: list[float] = []
        self.images: dict[str, Any] = {}

    def measure(self) -> float:
        output = Path(self.spec["workdir"]) / f"{self.name}-{self.runs}"
        self.runs += 1
        spec = json.dumps({**self.spec, "output": str(output)})
        command = [sys.executable, str(HERE / "w7_ingest.py"), "child", self.name, spec]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                              cwd=HERE.parents[1])  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        lines = [x for x in done.stdout.splitlines() if x.startswith("W7RESULT ")]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"{self.name} failed ({done.returncode}): {done.stderr[-2000:]}")
        seconds = float(json.loads(lines[-1].split(" ", 1)[1])["seconds"])
        if self.name == "img2dataset":
            outcome, paths = img2dataset.outcome(output)
        else:
            outcome, paths = _aioloader_outcome(output, list(self.expected))
        if outcome != self.expected:
            wrong = [
                (u, outcome.get(u), e) for u, e in self.expected.items() if outcome.get(u) != e
            ]
            raise AssertionError(f"{self.name}: {len(wrong)} URLs differ from the server's fate "
                                 f"table (url, got, expected): {wrong[:5]}")  # fmt: skip
        counts = Counter(outcome.values())
        successes = self.facts["successes"] = counts.pop("ok", 0)
        self.facts["failures by reason"] = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.cpu.append(cpu / max(1, successes))
        self.facts["CPU ms/image"] = round(1e3 * statistics.median(self.cpu), 2)
        if self.runs == 1:
            self._read_back(paths, successes)
        if self.against and self.against.images and self.images and PIXEL_DIFF not in self.facts:
            self.facts[PIXEL_DIFF] = _compare_images(self.images, self.against.images)
        shutil.rmtree(output, ignore_errors=True)
        return successes / seconds

    def _read_back(self, paths: list[Path], successes: int) -> None:
        """The first run's shards read by webdataset and by TarShards; some images decoded."""
        import anyio
        import numpy as np
        import webdataset as wds
        from PIL import Image

        from aioloader.sources import TarShards

        dataset = wds.WebDataset([str(p) for p in paths], shardshuffle=False, empty_check=False)
        with_webdataset = sum(1 for sample in dataset if "jpg" in sample)
        with tempfile.TemporaryDirectory(prefix="w7-index-") as index_dir:
            shards: TarShards[Any] = TarShards([str(p) for p in paths], index_dir=index_dir)
            samples = anyio.run(shards.get_samples, range(len(shards)))
        if not with_webdataset == len(samples) == successes:
            raise AssertionError(
                f"{self.name}: webdataset reads {with_webdataset} samples, "
                f"TarShards {len(samples)}, but {successes} succeeded"
            )
        self.facts["webdataset / TarShards samples"] = f"{with_webdataset:,} / {len(samples):,}"
        ok = [url for url, outcome in self.expected.items() if outcome == "ok"]
        checked = set(ok[:: max(1, len(ok) // int(self.spec["checked_images"]))])
        for sample in samples:
            if (url := json.loads(sample["json"])["url"]) in checked:
                image = Image.open(io.BytesIO(sample["jpg"])).convert("RGB")
                self.images[url] = np.asarray(image)
        shapes = {image.shape for image in self.images.values()}
        if shapes != {(self.spec["size"], self.spec["size"], 3)}:
            raise AssertionError(f"{self.name}: decoded image shapes {shapes}")


def _compare_images(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Mean absolute pixel difference over the URLs both systems' checked images share."""
    import numpy as np

    common = sorted(set(a) & set(b))
    diffs = [float(np.abs(a[u].astype(np.int16) - b[u].astype(np.int16)).mean()) for u in common]
    if not diffs:
        return "n/a"
    return f"{statistics.mean(diffs):.2f} (max {max(diffs):.2f}, {len(common)} images)"


def cases(cfg: W7Config, log: Any, stack: Any) -> list[Case]:
    """Start the image server (stopped by ``stack``), write the URL list, build the rows."""
    from tests._support.image_server import ImageServer, fate, url_list

    server = stack.enter_context(ImageServer())
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="w7-")))
    urls = url_list(server.base, cfg.urls)
    (workdir / "urls.txt").write_text("\n".join(urls) + "\n", encoding="utf-8")
    expected = {url: REASONS.get(fate(urlsplit(url).path), "ok") for url in urls}
    can = sum(v == "ok" for v in expected.values())
    log(f"  W7: {cfg.urls:,} URLs at {server.base}; {can:,} can succeed")
    # The spec of every child: the settings (aioloader's unless overridden), the files.
    common = {**dataclasses.asdict(cfg), "url_file": str(workdir / "urls.txt"),
              "workdir": str(workdir)}  # fmt: skip
    theirs = _System("img2dataset", {**common, "processes": cfg.i2d_processes,
                                     "threads": cfg.i2d_threads}, expected)  # fmt: skip
    mine = _System("aioloader", common, expected, theirs)
    split_spec = {**common, "in_flight": cfg.in_flight // 2, "threads": 1}
    split = _System("aioloader-processes", split_spec, expected, theirs)
    rows = [
        (theirs, f"img2dataset 1.47.0: {cfg.i2d_processes} processes x {cfg.i2d_threads} threads",
         "download(..., output_format='webdataset', resize_mode='center_crop')"),
        (mine, f"{SINGLE_PREFIX}{cfg.in_flight} in flight, {cfg.threads} threads",
         "ingest(image=ImageOptions(256, 'center_crop', reduced_decode=False)), uvloop"),
        (split, f"{SPLIT_PREFIX}{cfg.processes} processes x ({cfg.in_flight // 2} in flight, "
         "1 thread), merge_parts",
         "ingest(start=, stop=) per spawned process into part-0000i/, then merge_parts"),
    ]  # fmt: skip
    return [
        Case(workload="W7", system=name, metric="images/s", measure=runs.measure,
             baseline=runs is theirs, group="img2dataset" if runs is theirs else "aioloader",
             note=note, facts=runs.facts)
        for runs, name, note in rows
    ]  # fmt: skip


# -- the workload, as run.py crosses it -----------------------------------------------------
def build(quick: bool, log: Any, stack: Any, args: Any) -> Any:
    """W7's cases and notes (left out, and said so, without img2dataset and the rest)."""
    cfg = W7Config(urls=400, checked_images=20) if quick else W7Config()
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no version check over the network
    if not harness.can_run("W7", ("aiohttp", "img2dataset", "PIL", "webdataset"), log):
        return [], ["Left out: img2dataset, webdataset, aiohttp or Pillow is missing (img2dataset "
                    "installed with pip --target DIR: --peer-path DIR)."]  # fmt: skip
    return cases(cfg, log, stack), [*NOTES, f"Settings: {cfg}."]


def targets(found: list[Case]) -> list[dict[str, Any]]:
    """aioloader's ingest (one process; two, as information) against img2dataset."""
    single = harness.best(found, "W7", "aioloader", prefix=SINGLE_PREFIX)
    split = harness.best(found, "W7", "aioloader", prefix=SPLIT_PREFIX)
    if single is None and split is None:
        return []
    theirs = harness.baseline_of(found, "W7")
    text = "W7: aioloader ingest, one process >= 1.5x img2dataset images/s"
    out = [harness.target(text, single, theirs, 1.5)]
    if split is not None:
        text = "W7 (information): aioloader ingest, 2 processes / img2dataset images/s"
        out.append({**harness.target(text, split, theirs, 1.5), "met": None})
    their_successes = theirs.facts.get("successes") if theirs else None
    for row in (row for row in (single, split) if row is not None):
        mine = row.facts.get("successes")
        measured = f"{mine} vs {their_successes}"
        same = theirs is not None and mine == their_successes
        out.append(harness.fact_target(f"W7: same success count ({row.system})", measured, same))
    mine = single or split
    if theirs is not None and mine is not None and "CPU ms/image" in theirs.facts:
        a, b = theirs.facts["CPU ms/image"], mine.facts.get("CPU ms/image")
        text = f"W7 (information): CPU per image, img2dataset / {mine.system}"
        out.append(harness.fact_target(text, f"{a / b:.2f}x ({a} vs {b} ms)" if b else "n/a", None))
    return out


if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    run = {
        "img2dataset": img2dataset.ingest,
        "aioloader": _ingest,
        "aioloader-processes": _ingest_split,
    }
    print("W7RESULT " + json.dumps(run[sys.argv[2]](json.loads(sys.argv[3]))), flush=True)
