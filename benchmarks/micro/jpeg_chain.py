"""JPEG decode, crop 300-360, resize 224, flip: JpegCropResize against Pillow, 1 and 2 threads.

N JPEGs of 500x375 are made in memory with Pillow. Each chain runs over all of them on
1 thread, then split over T threads (samples k, k+T, ...). Per row: wall and CPU time per
sample, CPU/wall (the cores kept busy), the speedup over one thread, and the share of a
sample's time that holds the GIL estimated from that speedup (Amdahl: ``T/speedup - 1``
over ``T - 1``; noisy where other work shares the cores). The probe column: how fast a
pure-Python loop on a second thread counts while the chain runs on one thread, against
the loop alone (1.0: the chain leaves the GIL free; near 0.5 or below: it holds it).

For JpegCropResize the GIL-held time is also measured directly: a sample's thread CPU
minus the CPU spent inside libjpeg-turbo's decode and the nogil kernel, plus the part of
those two calls that holds the GIL (their cost on a tiny input: argument parsing,
allocation). What remains is Python: checks, draws, the calls themselves.
"""

import io
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import simplejpeg
from PIL import Image

from aioloader import JpegCropResize, takes_rng
from aioloader.core import SampleRng
from aioloader.core import _image_chain as chain_module
from aioloader.kernels import use_kernels

from ._common import options

CROP, SIZE = (300, 360), 224
inside = threading.local()  # CPU seconds inside the GIL-free calls, per thread


def make_jpegs(count: int) -> list[bytes]:
    """500x375 JPEGs: smooth gradients plus noise, quality 90 (4:2:0)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:375, 0:500]
    files = []
    for index in range(count):
        base = np.stack([(x + index) % 256, y * 255 // 375, (x + y) // 4 % 256], -1)
        pixels = np.clip(base + rng.integers(-24, 25, base.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
        files.append(buffer.getvalue())
    return files


def timed(call: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return call(*args, **kwargs)
        finally:
            inside.seconds = getattr(inside, "seconds", 0.0) + time.thread_time() - started

    return run


def pillow_chain(chain: JpegCropResize) -> Callable[[bytes, SampleRng], Any]:
    """The same draws, decoded, cropped, resized and flipped by Pillow."""

    @takes_rng
    def run(data: bytes, rng: SampleRng) -> Any:
        image = Image.open(io.BytesIO(data)).convert("RGB")
        top, left, height, width, flip = chain.draw((image.height, image.width), rng)
        box = (left, top, left + width, top + height)
        image = image.resize((SIZE, SIZE), Image.Resampling.BILINEAR, box=box)
        if flip:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return np.asarray(image)

    return run


def run_threads(work: Callable[[bytes, SampleRng], Any], files: list[bytes], threads: int):
    """``(wall, cpu, inside)`` seconds for every file, split over ``threads`` threads."""
    cpu, spent = [0.0] * threads, [0.0] * threads
    start = threading.Barrier(threads + 1)

    def body(k: int) -> None:
        start.wait()
        inside.seconds = 0.0
        began = time.thread_time()
        for index in range(k, len(files), threads):
            work(files[index], SampleRng(index))
        cpu[k], spent[k] = time.thread_time() - began, inside.seconds

    pool = [threading.Thread(target=body, args=(k,)) for k in range(threads)]
    for thread in pool:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in pool:
        thread.join()
    return time.perf_counter() - began, sum(cpu), sum(spent)


def probe(work: Callable[[bytes, SampleRng], Any], files: list[bytes]) -> float:
    """A counting thread's rate while ``work`` runs over ``files``, against its rate alone."""
    stop, counts = threading.Event(), [0]

    def count() -> None:
        n = 0
        while not stop.is_set():
            n += 1
        counts[0] = n

    def rate(body: Callable[[], None]) -> float:
        stop.clear()
        counter = threading.Thread(target=count)
        counter.start()
        began = time.perf_counter()
        body()
        stop.set()
        counter.join()
        return counts[0] / (time.perf_counter() - began)

    alone = rate(lambda: time.sleep(0.3))
    busy = rate(lambda: [work(data, SampleRng(k)) for k, data in enumerate(files)])
    return busy / alone


def call_overhead(rounds: int = 2000) -> float:
    """CPU seconds per sample of the GIL-held part of decode_jpeg and the kernel."""
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, "JPEG")
    tiny, image, out = (
        buffer.getvalue(),
        np.zeros((1, 1, 3), np.uint8),
        np.empty((1, 1, 3), np.uint8),
    )
    kernel = chain_module._kernel()
    began = time.thread_time()
    for _ in range(rounds):
        simplejpeg.decode_jpeg(tiny, "RGB", False, False)
        kernel(image, 0, 0, 1, 1, 1, 1, False, out)
    return (time.thread_time() - began) / rounds


def main() -> None:
    args = options(__doc__.splitlines()[0], count=512, threads=2, rounds=3)
    files = make_jpegs(args.count)
    ours = JpegCropResize(SIZE, CROP, flip=True)
    reduced = JpegCropResize(SIZE, CROP, flip=True, dct_scale=2)
    with use_kernels("numba"):
        ours(files[0], SampleRng(0))  # compile or load the kernel
        kernel = timed(chain_module._kernel())
        chain_module._kernel = lambda: kernel  # the chain calls the timed kernel
        simplejpeg.decode_jpeg = timed(simplejpeg.decode_jpeg)
        overhead = call_overhead()
        rows = [
            ("JpegCropResize", ours),
            ("  dct_scale=2", reduced),
            ("Pillow", pillow_chain(ours)),
        ]
        size = sum(map(len, files)) / len(files) / 1e3
        print(
            f"{args.count} JPEGs of 500x375, {size:.0f} KB each; best of {args.rounds}; "
            "the cores are shared, so the figures are rough"
        )
        print(f"GIL-held part of the decode and kernel calls (tiny input): {overhead * 1e6:.1f} us")
        print(
            "| chain | threads | wall us/sample | CPU us/sample | CPU/wall | speedup | "
            "GIL share (Amdahl) | GIL-held us/sample (measured) | probe |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, work in rows:
            single = None
            for threads in (1, args.threads):
                best = min(
                    (run_threads(work, files, threads) for _ in range(args.rounds)),
                    key=lambda r: r[0],
                )
                wall, cpu, spent = (seconds / args.count for seconds in best)
                single = single or wall
                speedup = single / wall
                amdahl = "" if threads == 1 else f"{(threads / speedup - 1) / (threads - 1):.2f}"
                measured = ""
                if name != "Pillow":
                    held = cpu - spent + overhead
                    measured = f"{held * 1e6:.1f} ({held / cpu:.1%})"
                probed = f"{probe(work, files):.2f}" if threads == 1 else ""
                print(
                    f"| {name} | {threads} | {wall * 1e6:,.0f} | {cpu * 1e6:,.0f} | "
                    f"{cpu / wall:.2f} | {speedup:.2f} | {amdahl} | {measured} | {probed} |"
                )


if __name__ == "__main__":
    main()
