"""Every workload on every system, interleaved, in one command; writes benchmarks/results/.

Run: ``.venv/bin/python benchmarks/run.py`` (about 6 to 9 minutes on 2 cores) or
``aioloader bench``. ``--quick`` shrinks every workload for a smoke run (seconds).

Workloads:
- W1: synthetic line images (docs/benchmarks.md): aioloader (workers 0, 1, 2; asyncio, uvloop),
  torch DataLoader (num_workers 0, 1, 2), SPDL 0.8 (1, 2 threads), Grain 0.2.18 (threads,
  processes), a hand-written numpy loop (the baseline) and two memory-copy floors.
- W2: 2,048 objects of 64 KiB from SeaweedFS on loopback, direct and with 20 ms added per
  request: aioloader's ObjectStore, a hand-written aiohttp client, torch (rows of
  ``benchmarks/micro/bench_object_store.py``; left out, and said so, without ``weed``/aiohttp).
- W3: 100,000 token sequences: padding in arrival order, bucketing, packing.
- W4: resume at step 10^9 of a shuffled epoch over 2^40 items, against torch.
- W5: JPEG decode + resize + normalise (Pillow), batch 64: plain loop, aioloader threads,
  torch DataLoader, SPDL, Grain (``benchmarks/workloads/w5_jpeg.py``).
- W8 (only when named: ``--workloads W8``; many minutes): three epochs over W6's JPEGs with a
  cache of 25% and 50% of the dataset: aioloader's memory (and disk) tier against MosaicML
  Streaming ``cache_limit``, LitData ``max_cache_size`` and WebDataset (no cache); bytes and
  requests per epoch against the optimum (``benchmarks/workloads/w8_cache.py``).
- W7 (only when named: ``--workloads W7``, several minutes): 10,000 URLs of JPEGs from a
  loopback server with 50 ms latency and 2 % faults, resized and written to WebDataset
  shards by aioloader's ``ingest`` and by img2dataset 1.47.0.
- W6 (only when named: ``--workloads W6``; minutes): 4,096 generated JPEGs from SeaweedFS,
  direct and +20 ms per request, against LitData, MosaicML Streaming and WebDataset, each in
  its own format. Peers: ``pip install -e '.[bench]'`` brings WebDataset; LitData and Mosaic
  need ``pip install --no-deps litdata==0.2.76 mosaicml-streaming==0.13.0`` plus their
  small runtime deps (listed in ``benchmarks/workloads/w6_object_storage.py``: both require
  torchvision, which would replace the CPU torch); a missing peer gives a "not installed"
  row.

Protocol: every case runs once per round, in a fixed order (A B C A B C ...); round 0 warms
up and is dropped. The reports give medians with min-max over the kept rounds and ratios
of medians measured in the same run: ``results.md``, ``results.json``, ``results.png``
(``w7.md``, ... when one workload is named alone).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent):  # benchmark modules, and tests._support for the S3 server
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import harness  # noqa: E402

WORKLOADS = ("W1", "W1U", "W1P", "W2", "W3", "W4", "W5", "W6", "W7", "W8")
OPT_IN = ("W6", "W7", "W8")  # long, or needing peers installed by hand: run only when named
TITLES = {
    "W1": "synthetic line images (2,048 images, C=1, H=32, W 64..256, batch 128, width multiple 4, "
    "GainOffset, shuffled)",
    "W1U": "the user's own code: W1's images, the user's transform and collate function in "
    "plain numpy, every loader running them (batch 128)",
    "W2": "object storage: 64 KiB objects from SeaweedFS on loopback, batches of 64",
    "W3": "100,000 token sequences, log-normal lengths (median 200, cap 2,048)",
    "W4": "resume at global step 10^9 of ShuffledSampler over 2^40 items (batch 128)",
    "W1P": "a GIL-bound transform: pure-Python loop over 3,000 floats per sample, batch 32",
    "W5": "JPEG decode (512 images of 50-90 KB, Pillow), resize 224x224, float32 CHW, batch 64",
    "W7": "web ingestion: 10,000 JPEG URLs on loopback (+50 ms, 2 % faults) -> resize 256 "
    "center crop -> WebDataset shards",
    "W6": "4,096 JPEGs (40-100 KB) from SeaweedFS: Pillow decode, resize 224, normalise, "
    "batch 64; cold epoch",
    "W8": "three epochs with a cache of 25% and 50% of the dataset: W6's JPEGs in about 32 "
    "shards from SeaweedFS, +20 ms per request; bytes and requests per epoch",
}
NOTES = {
    "W1": [
        "All rows but the floors give bit-identical batches (checked on 17 steps across an "
        "epoch boundary before timing); the floors give the same image shapes. The consumer "
        "releases each batch and does nothing else. Batches/s over 256 batches after 16 "
        "untimed ones (startup, prefetch fill) per round.",
    ],
    "W1U": [
        "Every row runs the same user functions on the same order and gives the plain loop's "
        "batches bit for bit (checked on 20 steps across an epoch boundary before timing). "
        "Ratios divide by the plain loop. aioloader rows consume with `async for` on uvloop.",
    ],
    "W2": [
        "Ratios: each aioloader row against the hand-written aiohttp row of the same path and "
        "reads in flight (torch against aiohttp at the smaller number in flight). The latency "
        "bound is reads in flight / 20 ms. On a small machine the server, the relay and the "
        "client share the cores, so the direct rows show what the machine can serve at all.",
    ],
    "W3": [
        "Real-token fraction: real tokens / positions computed over a whole epoch (padding: "
        "batch size x longest sequence of the batch; packing: rows x 2,048). Epoch plan: "
        "sampler construction plus epoch 0's table (none for the shuffled sampler).",
    ],
    "W4": [
        "Ratios divide torch's naive resume (load and drop 10^9 batches) by each row. Rows "
        "marked extrapolated time a smaller skip and scale it linearly.",
    ],
    "W1P": [
        "Every row gives bit-identical batches (checked before timing). Batches/s over 60 "
        "batches after 4 untimed ones (process start-up, prefetch fill) per round; "
        "'first batch (s)' is from opening a stream to its first batch.",
    ],
    "W5": [
        "All rows give bit-identical batches (checked on 3 steps before timing). Images/s over "
        "8 batches (one epoch) after 2 untimed ones per round. Ratios against the plain loop.",
    ],
    "W7": [
        "Images/s: successful images / wall seconds of the ingestion call, each run a fresh "
        "process, both on the same 2 cores (the server too). Every run's successes and "
        "failures are checked URL by URL against the server's fate table; the first run's "
        "shards are read by webdataset and by TarShards. See benchmarks/workloads/w7_ingest.py.",
    ],
    "W6": [
        "Each row runs in a fresh process per round with empty local caches: one cold epoch "
        "(loader construction included), then a fresh loader resumed at 75% of the epoch. "
        "Ratios: each row against WebDataset with 2 workers on the same path. Requests and "
        "bytes are counted by the relay (+20 ms rows only); S3 CPU is the SeaweedFS "
        "process's utime + stime over the epoch. Sample 17's tensor equals preprocess() of "
        "its JPEG in every row (checked in every round, the warm-up included). WebDataset "
        "has no resume: its row rebuilds the pipeline and skips 75% of each worker's samples "
        "before decoding (still downloading them), in a different order.",
    ],
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py",
        description="Run every benchmark workload, interleaved, and write the results.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round (smoke)")
    parser.add_argument("--rounds", type=int, help="kept rounds (default 7, quick 1)")
    parser.add_argument("--w8-images", type=int, help="W8's dataset size (default 4,096)")
    parser.add_argument(
        "--output", type=Path, default=HERE / "results", help="directory for the results"
    )
    parser.add_argument(
        "--workloads",
        default=",".join(w for w in WORKLOADS if w not in OPT_IN),
        help=f"comma-separated subset of {','.join(WORKLOADS)} "
        f"({','.join(OPT_IN)} only when named)",
    )
    args = parser.parse_args(argv)
    chosen = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown:
        parser.error(f"--workloads must name {', '.join(WORKLOADS)} but got {unknown}")
    args.workloads = [w for w in WORKLOADS if w in chosen]
    if args.rounds is None:
        args.rounds = 1 if args.quick else 7
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1 but got {args.rounds}")
    if args.w8_images is not None and (args.w8_images < 64 or args.w8_images % 64):
        parser.error(f"--w8-images must be a multiple of 64 (the batch) but got {args.w8_images}")
    return args


def build_cases(
    workloads: list[str],
    quick: bool,
    log: Any,
    stack: contextlib.ExitStack,
    w8_images: int | None = None,
) -> tuple[list[harness.Case], dict[str, list[str]]]:
    notes = {k: list(v) for k, v in NOTES.items()}
    cases: list[harness.Case] = []
    if "W1" in workloads:
        from workloads import w1_images

        cfg = (
            w1_images.W1Config(images=256, batch=32, warm=2, count=8, verify=9)
            if quick
            else w1_images.W1Config()
        )
        log("W1: building and checking every port")
        cases += w1_images.cases(cfg, log)
        if quick:
            notes["W1"] = [f"Quick run: {cfg}."]
    if "W1U" in workloads:
        from workloads import w1u_user_code

        cfg1u = (
            w1u_user_code.W1uConfig(images=512, batch=32, warm=2, count=8, verify=9)
            if quick
            else w1u_user_code.W1uConfig()
        )
        log("W1u: building and checking every port")
        cases += w1u_user_code.cases(cfg1u, log)
    if "W2" in workloads:
        from workloads import w2_object_store

        cfg2 = (
            w2_object_store.W2Config(objects=128, inflight=(32,), torch_workers=None)
            if quick
            else w2_object_store.W2Config()
        )
        log("W2: starting SeaweedFS and the 20 ms relay, uploading")
        if w2_object_store.available(log):
            cases += w2_object_store.cases(cfg2, log, stack)
            if quick:
                notes["W2"].append(f"Quick run: {cfg2}.")
        else:
            notes["W2"] = ["Left out: SeaweedFS (`weed`), aiohttp or obstore is missing."]
    if "W3" in workloads:
        from workloads import w3_tokens

        cfg3 = (
            w3_tokens.W3Config(sequences=4000, warm=2, count=8) if quick else w3_tokens.W3Config()
        )
        log("W3: building sequences and samplers")
        cases += w3_tokens.cases(cfg3, log)
        if quick:
            notes["W3"].append(f"Quick run: {cfg3}.")
    if "W4" in workloads:
        from workloads import w4_resume

        cfg4 = (
            w4_resume.W4Config(
                skip_items=2**16,
                skip_batches=100,
                stateful_items=2**16,
                stateful_steps=64,
                rss_items=2**18,
            )
            if quick
            else w4_resume.W4Config()
        )
        log("W4: measuring sampler memory and building torch's resume paths")
        w4_cases, w4_notes = w4_resume.cases(cfg4, log)
        cases += w4_cases
        notes["W4"] = w4_notes + notes["W4"]
        if quick:
            notes["W4"].append(f"Quick run: {cfg4}.")
    if "W1P" in workloads:
        from workloads import w1p_gil

        cfg1p = w1p_gil.W1PConfig(count=8, verify=2) if quick else w1p_gil.W1PConfig()
        log("W1P: building and checking every port")
        cases += w1p_gil.cases(cfg1p, log)
        if quick:
            notes["W1P"].append(f"Quick run: {cfg1p}.")
    if "W5" in workloads:
        from workloads import w5_jpeg

        cfg5 = (
            w5_jpeg.W5Config(
                images=16,
                batch=8,
                source_width=160,
                source_height=120,
                warm=1,
                count=2,
                verify=2,
                processes=False,
            )
            if quick
            else w5_jpeg.W5Config()
        )
        log("W5: generating JPEGs, building and checking every port")
        cases += w5_jpeg.cases(cfg5, log)
        if quick:
            notes["W5"].append(f"Quick run: {cfg5}.")
    if "W7" in workloads:
        from workloads import w7_ingest

        cfg7 = w7_ingest.W7Config(urls=400, checked_images=20) if quick else w7_ingest.W7Config()
        if w7_ingest.available(log):
            cases += w7_ingest.cases(cfg7, log, stack)
            notes["W7"].append(f"Settings: {cfg7}.")
        else:
            notes["W7"] = ["Left out: img2dataset, webdataset, aiohttp or Pillow is missing."]
    if "W8" in workloads:
        from workloads import w8_cache

        cfg8 = (
            w8_cache.W8Config(images=512, shards=16, peers=False)
            if quick
            else w8_cache.W8Config(images=w8_images or 4096)
        )
        log("W8: generating JPEGs and formats (cached), starting SeaweedFS and the relay")
        if w8_cache.available(log):
            cases += w8_cache.cases(cfg8, log, stack)
            notes["W8"] = [*w8_cache.NOTES, f"Settings: {cfg8}."]
        else:
            notes["W8"] = [
                "Left out: SeaweedFS (`weed`), Pillow, obstore or webdataset is missing."
            ]
    if "W6" in workloads:
        from workloads import w6_object_storage

        cfg6 = (
            w6_object_storage.W6Config(images=512, direct=False)
            if quick
            else w6_object_storage.W6Config()
        )
        log("W6: generating JPEGs and formats (cached), starting SeaweedFS and the relay")
        if w6_object_storage.available(log):
            cases += w6_object_storage.cases(cfg6, log, stack)
            if quick:
                notes["W6"].append(f"Quick run: {cfg6}.")
        else:
            notes["W6"] = ["Left out: SeaweedFS (`weed`), Pillow or obstore is missing."]
    return cases, notes


# -- targets ----------------------------------------------------------------------------
def _median(case: harness.Case | None) -> float | None:
    return harness.Case.summary(case)["median"] if case is not None else None


def _best(cases: list[harness.Case], workload: str, group: str, prefix: str = "") -> Any:
    mine = [
        c
        for c in cases
        if c.workload == workload and c.group == group and c.values and c.system.startswith(prefix)
    ]
    if not mine:
        return None
    pick = max if mine[0].higher_is_better else min
    return pick(mine, key=lambda c: harness.Case.summary(c)["median"])


def _target(text: str, mine: Any, theirs: Any, at_least: float) -> dict[str, Any]:
    if mine is None or theirs is None:
        return {"target": text, "measured": "n/a (a row is missing)", "met": None}
    a, b = _median(mine), _median(theirs)
    value = a / b if a and b else 0.0
    return {
        "target": text,
        "measured": f"{value:.2f}x ({mine.system} {a:,.0f} vs {theirs.system} {b:,.0f})",
        "ratio": value,
        "met": value >= at_least,
    }


def targets(cases: list[harness.Case]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    w1 = [c for c in cases if c.workload == "W1"]
    if w1:
        best = _best(cases, "W1", "aioloader")
        torch_best, spdl_best = _best(w1, "W1", "torch"), _best(w1, "W1", "spdl")
        out.append(_target("W1: aioloader best >= 3x torch best", best, torch_best, 3))
        out.append(_target("W1: aioloader best >= 2x SPDL best", best, spdl_best, 2))
        floor = next((c for c in w1 if c.system.startswith("memory-copy floor")), None)
        out.append(_target("W1: aioloader best >= 0.5x memory-copy floor", best, floor, 0.5))
        zero = _best(cases, "W1", "aioloader", "aioloader workers=0")
        hand = harness.baseline_of(cases, "W1")
        out.append(_target("W1: aioloader workers=0 >= 1.0x hand-written loop", zero, hand, 1.0))
        two = _best(cases, "W1", "aioloader", "aioloader workers=2")
        out.append(_target("W1: aioloader workers=2 >= 1.7x workers=0", two, zero, 1.7))
        memcpy = next((c for c in w1 if c.system.startswith("memcpy reference")), None)
        out.append(_target("W1: aioloader best >= 0.6x one np.copyto per batch", best, memcpy, 0.6))
    w1u = [c for c in cases if c.workload == "W1U"]
    if w1u:
        plain = harness.baseline_of(cases, "W1U")
        async0 = next((c for c in w1u if c.system == "aioloader async get_sample, workers=0"), None)
        torch0 = next((c for c in w1u if c.system == "torch DataLoader num_workers=0"), None)
        sync_best = _best(w1u, "W1U", "aioloader", "aioloader sync")
        out.append(_target("W1u: async dataset workers=0 >= 0.95x plain loop", async0, plain, 0.95))
        out.append(
            _target("W1u: async dataset workers=0 >= 1.0x torch 0 workers", async0, torch0, 1)
        )
        out.append(_target("W1u: sync dataset best >= 0.95x plain loop", sync_best, plain, 0.95))
    if any(c.workload == "W5" for c in cases):
        zero5 = _best(cases, "W5", "aioloader", "aioloader workers=0")
        two5 = _best(cases, "W5", "aioloader", "aioloader workers=2")
        torch5 = _best(cases, "W5", "torch")
        out.append(_target("W5: aioloader workers=2 >= 1.8x workers=0", two5, zero5, 1.8))
        out.append(_target("W5: aioloader workers=2 >= 1.5x torch best", two5, torch5, 1.5))
    for label, word, bound in (("packing", "packing", 0.98), ("bucketing", "bucketing", 0.90)):
        case = next((c for c in cases if c.workload == "W3" and word in c.system), None)
        if case is not None:
            fraction = case.facts["real-token fraction"]
            out.append(
                {
                    "target": f"W3: {label} >= {bound:.0%} real tokens",
                    "measured": f"{fraction:.2%}",
                    "met": fraction >= bound,
                }
            )
    if any(c.workload == "W1P" for c in cases):
        from workloads import w1p_gil

        out += w1p_gil.targets(cases, _target)
    ingest = _best(cases, "W7", "aioloader")
    if ingest is not None:
        theirs = harness.baseline_of(cases, "W7")
        out.append(
            _target("W7: aioloader ingest >= 1.5x img2dataset images/s", ingest, theirs, 1.5)
        )
        same = theirs is not None and ingest.facts.get("successes") == theirs.facts.get("successes")
        out.append(
            {
                "target": "W7: same success count",
                "measured": f"{ingest.facts.get('successes')} vs "
                f"{theirs.facts.get('successes') if theirs else None}",
                "met": same,
            }
        )
        if theirs is not None and "CPU ms/image" in theirs.facts:
            a, b = theirs.facts["CPU ms/image"], ingest.facts.get("CPU ms/image")
            out.append(
                {
                    "target": "W7 (information): CPU per image, img2dataset / aioloader",
                    "measured": f"{a / b:.2f}x ({a} vs {b} ms)" if b else "n/a",
                    "met": None,
                }
            )
    resume = next((c for c in cases if c.workload == "W4" and c.group == "aioloader"), None)
    if resume is not None and resume.values:
        ms = _median(resume) * 1e3  # type: ignore[operator]
        out.append(
            {
                "target": "W4: first batch at step 10^9 in < 10 ms",
                "measured": f"{ms:.2f} ms (median; max {max(resume.values) * 1e3:.2f} ms)",
                "met": ms < 10,
            }
        )
        memory = resume.facts.get("sampler memory", "")
        out.append(
            {
                "target": "W4: sampler memory independent of dataset size",
                "measured": memory,
                "met": "same for" in memory,
            }
        )
    if any(c.workload == "W6" for c in cases):
        from workloads import w6_object_storage

        out += w6_object_storage.targets(cases)
    if any(c.workload == "W8" for c in cases):
        from workloads import w8_cache

        out += w8_cache.targets(cases)
    return out


# -- the plot ---------------------------------------------------------------------------
COLORS = {
    "aioloader": "#1f77b4",
    "torch": "#d62728",
    "spdl": "#9467bd",
    "grain": "#2ca02c",
    "hand-written": "#7f7f7f",
    "floor": "#bcbd22",
    "img2dataset": "#ff7f0e",
}


def plot(path: Path, data: dict[str, Any]) -> bool:
    """A PNG with one panel per workload; False when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if r["median"] is not None]
    panels = [w for w in WORKLOADS if any(r["workload"] == w for r in rows)]
    heights = [max(2.0, 0.38 * sum(r["workload"] == w for r in rows) + 1.0) for w in panels]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(10, sum(heights) + 0.6),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for ax, workload in zip(axes[:, 0], panels, strict=True):
        mine = [r for r in rows if r["workload"] == workload]
        names = [r["system"] for r in mine]
        medians = [r["median"] for r in mine]
        low = [r["median"] - r["min"] for r in mine]
        high = [r["max"] - r["median"] for r in mine]
        colors = [COLORS.get(r["group"], "#17becf") for r in mine]
        y = list(range(len(mine)))[::-1]
        ax.barh(y, medians, xerr=[low, high], color=colors, capsize=3)
        ax.set_yticks(y)
        ax.set_yticklabels(names, fontsize=8)
        ax.set_xlabel(mine[0]["metric"] + " (median, min-max)", fontsize=9)
        if workload == "W4":
            ax.set_xscale("log")
        for yi, r in zip(y, mine, strict=True):
            value = r["median"]
            label = f"  {value:,.0f}" if value >= 100 else f"  {value:.3g}"
            fraction = r["facts"].get("real-token fraction")
            if fraction is not None:
                label += f" ({fraction:.1%} real)"
            ax.text(r["max"], yi, label, va="center", fontsize=7)
        ax.set_xlim(right=ax.get_xlim()[1] * (30 if workload == "W4" else 1.25))
        title = textwrap.fill(f"{workload}: {TITLES[workload]}", 80)
        ax.set_title(title, fontsize=9, loc="left")
    machine = data["machine"]
    fig.suptitle(
        f"aioloader benchmarks: {machine['cpu']}, {machine['usable_cores']} cores, "
        f"{machine['python']}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    os.environ.setdefault("GRAIN_PY_TRACEBACK_FILTERING", "off")
    facts = harness.machine_facts()
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:  # W2's server and relay live for the whole run
        cases, notes = build_cases(args.workloads, args.quick, log, stack, args.w8_images)
        log(f"{len(cases)} cases; {args.rounds} rounds after a warm-up round, interleaved")
        harness.run_interleaved(cases, args.rounds, log)
    seconds = time.perf_counter() - started
    facts["load_average_end"] = harness._load()
    settings = {
        "command": harness.python_command(),
        "rounds": args.rounds,
        "quick": args.quick,
        "workloads": args.workloads,
        "seconds": round(seconds, 1),
    }
    notes = {w: n for w, n in notes.items() if w in args.workloads}
    data = harness.to_json(cases, facts, settings, targets(cases), notes)
    args.output.mkdir(parents=True, exist_ok=True)
    stem = args.workloads[0].lower() if len(args.workloads) == 1 else "results"
    harness.write_json(args.output / f"{stem}.json", data)
    markdown = harness.to_markdown(data, {w: TITLES[w] for w in args.workloads})
    (args.output / f"{stem}.md").write_text(markdown, encoding="utf-8")
    if not plot(args.output / f"{stem}.png", data):
        log(f"matplotlib is not installed: no {stem}.png")
    print(markdown)
    log(f"wrote {args.output}/{stem}.md, {stem}.json, {stem}.png in {seconds:.0f} s")
    failed = [c for c in cases if c.error]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
