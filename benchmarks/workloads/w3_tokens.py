"""W3: token sequences, padded in arrival order, bucketed, or packed into rows of 2,048.

docs/benchmarks.md (W3) gives the settings.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import harness
import numpy as np
from harness import Case
from systems.aioloader import Aioloader

from aioloader import DataLoader, core
from aioloader.testing import MemoryDataset

NAME = "W3"
TITLE = "100,000 token sequences, log-normal lengths (median 200, cap 2,048)"
NOTES = [
    "Real-token fraction: real tokens / positions computed over a whole epoch (padding: "
    "batch size x longest sequence of the batch; packing: rows x 2,048). Epoch plan: "
    "sampler construction plus epoch 0's table (none for the shuffled sampler).",
]

SEED, CAP, BATCH, ROWS, POOL = 3, 2048, 64, 10, 100  # ROWS of CAP tokens: a packed batch
TITLES = {
    "arrival": "aioloader: pad, arrival order (ShuffledSampler + PadCollator)",
    "bucketed": f"aioloader: bucketing (BucketedSampler pool_batches={POOL})",
    "packed": f"aioloader: packing (PackedSampler + PackCollator, rows of {CAP})",
}


@dataclasses.dataclass(frozen=True)
class W3Config:
    sequences: int = 100_000  # lengths log-normal (median 200, sigma 1), clipped to [1, CAP]
    warm: int = 8
    count: int = 200


def real_tokens(batch: Any) -> int:
    """Real tokens of a PaddedBatch, a PackedBatch or the hand pad's dict."""
    if isinstance(batch, dict):
        return int(batch["lengths"].sum())
    if getattr(batch, "lengths", None) is not None:
        return int(batch.lengths.sum())
    return int(np.count_nonzero(batch.segment_ids >= 0))


def plan(name: str, lengths: np.ndarray) -> tuple[Any, Any, float, float]:
    """A strategy's sampler and collator; the seconds to build them and epoch 0's table (none
    for the shuffled sampler); the real-token fraction of epoch 0 (exact)."""
    started = time.perf_counter()
    if name == "packed":
        sampler = core.PackedSampler(lengths, CAP, ROWS)
        collator: Any = core.PackCollator(CAP, sampler=sampler)
        sampler.layout(SEED, 0, 0)
    elif name == "bucketed":
        sampler, collator = core.BucketedSampler(lengths, BATCH, POOL), core.PadCollator()
        sampler.epoch_plan(SEED, 0)
    else:
        sampler, collator = core.ShuffledSampler(len(lengths), BATCH), core.PadCollator()
    seconds = time.perf_counter() - started
    if name == "packed":
        return sampler, collator, seconds, float(lengths.sum()) / (sampler.num_rows * CAP)
    if name == "bucketed":
        table = sampler.epoch_plan(SEED, 0).astype(np.int64)
    else:
        table = np.stack([sampler.indices(SEED, 0, s) for s in range(sampler.steps_per_epoch)])
    per_batch = lengths[table]
    fraction = float(per_batch.sum()) / float(per_batch.max(axis=1).sum() * table.shape[1])
    return sampler, collator, seconds, fraction


def loader_rate(make: Callable[[], Any], cfg: W3Config) -> float:
    """Real tokens/s of ``count`` batches after ``warm`` of a fresh loader, ``async for``."""
    import anyio

    loader = make()

    async def consume() -> float:
        seen, started, tokens = 0, 0.0, 0
        async with loader.stream(0, cfg.warm + cfg.count) as stream:
            async for batch in stream:
                if seen == cfg.warm:
                    started = time.perf_counter()
                if seen >= cfg.warm:
                    tokens += real_tokens(batch)
                batch.release()
                seen += 1
            ended = time.perf_counter()
        return tokens / (ended - started)

    return float(anyio.run(consume))


class HandPad(harness.Steps):
    """Baseline: shuffled batches padded with plain numpy (np.zeros + copy + mask)."""

    name = "hand-written pad"

    def __init__(self, cfg: W3Config, seqs: list[Any]) -> None:
        self.cfg, self.seqs = cfg, seqs
        self.sampler = core.ShuffledSampler(cfg.sequences, BATCH)

    def step(self, step: int) -> dict[str, np.ndarray]:
        chosen = [self.seqs[i] for i in self.sampler.indices(SEED, 0, step).tolist()]
        lengths = np.array([s.shape[0] for s in chosen], np.int64)
        tokens = np.zeros((len(chosen), int(lengths.max())), np.int32)
        for i, seq in enumerate(chosen):
            tokens[i, : seq.shape[0]] = seq
        mask = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
        return {"tokens": tokens, "lengths": lengths, "attention_mask": mask}

    def real_tokens_per_second(self) -> float:
        warm, count = self.cfg.warm, self.cfg.count
        for step in range(warm):
            self.step(step)
        started, tokens = time.perf_counter(), 0
        for step in range(warm, warm + count):
            tokens += real_tokens(self.step(step))
        return tokens / (time.perf_counter() - started)


def cases(cfg: W3Config, log: Callable[[str], None]) -> list[Case]:
    """The hand pad, then each strategy through ``DataLoader`` (workers=0, asyncio)."""
    rng = np.random.default_rng(SEED)
    raw = np.rint(rng.lognormal(np.log(200.0), 1.0, cfg.sequences))
    lengths = np.clip(raw, 1, CAP).astype(np.int64)
    tokens = rng.integers(1, 32_000, size=int(lengths.sum()), dtype=np.int32)
    ends = np.cumsum(lengths).tolist()
    seqs = [tokens[e - n : e] for e, n in zip(ends, lengths.tolist(), strict=True)]
    dataset, hand = MemoryDataset(seqs), HandPad(cfg, seqs)
    out = []
    for name, title in TITLES.items():
        sampler, collator, seconds, fraction = plan(name, lengths)
        make = functools.partial(DataLoader, dataset, sampler, collator, seed=SEED, workers=0)
        batch = f"{ROWS} rows of {CAP}" if name == "packed" else f"{BATCH} sequences"
        facts = {"batch": batch, "real-token fraction": round(fraction, 4)}
        if name == "arrival":  # the baseline pads the same batches, checked bit-identical
            pad = Aioloader(make, uvloop=False)
            pad.name = "PadCollator"
            arrays = harness.fields(("tokens", "lengths", "attention_mask"))
            harness.verify("W3", [pad, hand], 3, arrays, log)
            note = "np.zeros + per-sequence copy + mask over ShuffledSampler batches"
            measure = hand.real_tokens_per_second
            system = "hand-written numpy pad, arrival order"
            out.append(
                _row(system, measure, note, dict(facts), baseline=True, group="hand-written")
            )
        facts["epoch plan (s)"] = round(seconds, 3)
        measure = functools.partial(loader_rate, make, cfg)
        note = f"DataLoader(workers=0), batches of {batch}"
        out.append(_row(title, measure, note, facts, group="aioloader"))
    return out


def _row(system: str, measure: Any, note: str, facts: dict[str, Any], **extra: Any) -> Case:
    return Case("W3", system, "real tokens/s", measure, note=note, facts=facts, **extra)


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    cfg = W3Config(sequences=4000, warm=2, count=8) if quick else W3Config()
    log("W3: building sequences and samplers")
    return cases(cfg, log), NOTES + ([f"Quick run: {cfg}."] if quick else [])


def targets(found: list[Case]) -> list[dict[str, Any]]:
    """The real-token fractions of packing and bucketing."""
    out = []
    for label, bound in (("packing", 0.98), ("bucketing", 0.90)):
        case = next((c for c in found if c.workload == "W3" and label in c.system), None)
        if case is not None:
            fraction = case.facts["real-token fraction"]
            text = f"W3: {label} >= {bound:.0%} real tokens"
            out.append(harness.fact_target(text, f"{fraction:.2%}", fraction >= bound))
    return out
