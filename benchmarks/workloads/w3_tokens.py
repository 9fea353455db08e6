"""W3: token sequences, padded in arrival order, bucketed, or packed into rows of 2,048.

100,000 log-normal sequences (median 200, cap 2,048) in memory through ``DataLoader``
(workers=0) against a hand-written numpy pad; real tokens/s and the exact real-token
fraction of an epoch. docs/benchmarks.md (W3) gives the settings.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import harness
import numpy as np
from harness import Case
from systems import aioloader as aioloader_system

from aioloader.core import (
    BucketedSampler,
    PackCollator,
    PackedSampler,
    PadCollator,
    ShuffledSampler,
)

SEED = 3


@dataclasses.dataclass(frozen=True)
class W3Config:
    sequences: int = 100_000
    median: float = 200.0
    sigma: float = 1.0
    cap: int = 2048
    batch: int = 64
    rows_per_batch: int = 10
    pool_batches: int = 100
    warm: int = 8
    count: int = 200


def make_sequences(cfg: W3Config) -> tuple[np.ndarray[Any, Any], list[np.ndarray[Any, Any]]]:
    """Lengths and token arrays (views of one int32 buffer)."""
    rng = np.random.default_rng(SEED)
    raw = np.rint(rng.lognormal(np.log(cfg.median), cfg.sigma, cfg.sequences))
    lengths = np.clip(raw, 1, cfg.cap).astype(np.int64)
    tokens = rng.integers(1, 32_000, size=int(lengths.sum()), dtype=np.int32)
    ends = np.cumsum(lengths).tolist()
    return lengths, [tokens[e - n : e] for e, n in zip(ends, lengths.tolist(), strict=True)]


def real_tokens(batch: Any) -> int:
    """Real tokens of a PaddedBatch, PackedBatch or the hand loop's dict."""
    if isinstance(batch, dict):
        return int(batch["lengths"].sum())
    lengths = getattr(batch, "lengths", None)
    if lengths is not None:
        return int(lengths.sum())
    return int(np.count_nonzero(batch.segment_ids >= 0))


def epoch_fraction(name: str, sampler: Any, lengths: np.ndarray[Any, Any], cfg: W3Config) -> float:
    """Real tokens / positions computed over epoch 0 (exact)."""
    if name == "packed":
        return float(lengths.sum()) / (sampler.num_rows * cfg.cap)
    if name == "bucketed":
        plan = sampler.epoch_plan(SEED, 0).astype(np.int64)
    else:
        plan = np.stack([sampler.indices(SEED, 0, s) for s in range(sampler.steps_per_epoch)])
    per_batch = lengths[plan]
    return float(per_batch.sum()) / float(per_batch.max(axis=1).sum() * plan.shape[1])


class Loader:
    """One strategy through ``aioloader.DataLoader`` (workers=0, asyncio)."""

    def __init__(self, name: str, cfg: W3Config, lengths: Any, seqs: list[Any]) -> None:
        from aioloader.testing import MemoryDataset

        self.name, self.cfg = name, cfg
        self.dataset = MemoryDataset(seqs)
        self.collator: Any
        started = time.perf_counter()
        if name == "arrival":
            self.sampler: Any = ShuffledSampler(cfg.sequences, cfg.batch)
            self.collator = PadCollator()
        elif name == "bucketed":
            self.sampler = BucketedSampler(lengths, cfg.batch, cfg.pool_batches)
            self.collator = PadCollator()
        else:
            self.sampler = PackedSampler(lengths, cfg.cap, cfg.rows_per_batch)
            self.collator = PackCollator(cfg.cap, sampler=self.sampler)
        # Sampler construction plus epoch 0's plan (a table only for bucketing and packing).
        if name == "bucketed":
            self.sampler.epoch_plan(SEED, 0)
        elif name == "packed":
            self.sampler.layout(SEED, 0, 0)
        self.plan_seconds = time.perf_counter() - started
        self.fraction = epoch_fraction(name, self.sampler, lengths, cfg)

    def measure(self) -> float:
        import anyio

        from aioloader import DataLoader

        loader = DataLoader(self.dataset, self.sampler, self.collator, seed=SEED, workers=0)
        warm, count = self.cfg.warm, self.cfg.count

        async def consume() -> float:
            seen, started, tokens = 0, 0.0, 0
            async with loader.stream(0, warm + count) as stream:
                async for batch in stream:
                    if seen == warm:
                        started = time.perf_counter()
                    if seen >= warm:
                        tokens += real_tokens(batch)
                    batch.release()
                    seen += 1
                ended = time.perf_counter()
            return tokens / (ended - started)

        return float(anyio.run(consume))


class HandPad(harness.Steps):
    """Baseline: shuffled batches padded with plain numpy (np.zeros + copy + mask)."""

    name = "hand-written pad"

    def __init__(self, cfg: W3Config, lengths: Any, seqs: list[Any]) -> None:
        self.cfg, self.lengths, self.seqs = cfg, lengths, seqs
        self.sampler = ShuffledSampler(cfg.sequences, cfg.batch)

    def step(self, step: int) -> dict[str, np.ndarray[Any, Any]]:
        order = self.sampler.indices(SEED, 0, step).tolist()
        chosen = [self.seqs[i] for i in order]
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


def verify(hand: HandPad, arrival: Loader, log: Callable[[str], None]) -> None:
    """The hand loop and PadCollator give the same padded batches (3 steps)."""
    from aioloader import DataLoader

    def make() -> Any:
        return DataLoader(arrival.dataset, arrival.sampler, arrival.collator, seed=SEED)

    pad = aioloader_system.Aioloader(make, uvloop=False)
    pad.name = "PadCollator"
    arrays = harness.fields(("tokens", "lengths", "attention_mask"))
    harness.verify("W3", [pad, hand], 3, arrays, log)


def cases(cfg: W3Config, log: Callable[[str], None]) -> list[Case]:
    lengths, seqs = make_sequences(cfg)
    hand = HandPad(cfg, lengths, seqs)
    loaders = {name: Loader(name, cfg, lengths, seqs) for name in ("arrival", "bucketed", "packed")}
    verify(hand, loaders["arrival"], log)
    batch_words = {
        "arrival": f"{cfg.batch} sequences",
        "bucketed": f"{cfg.batch} sequences",
        "packed": f"{cfg.rows_per_batch} rows of {cfg.cap}",
    }
    titles = {
        "arrival": "aioloader: pad, arrival order (ShuffledSampler + PadCollator)",
        "bucketed": f"aioloader: bucketing (BucketedSampler pool_batches={cfg.pool_batches})",
        "packed": f"aioloader: packing (PackedSampler + PackCollator, rows of {cfg.cap})",
    }
    out = [
        Case(
            workload="W3",
            system="hand-written numpy pad, arrival order",
            metric="real tokens/s",
            measure=hand.real_tokens_per_second,
            baseline=True,
            group="hand-written",
            note="np.zeros + per-sequence copy + mask over ShuffledSampler batches",
            facts={
                "batch": batch_words["arrival"],
                "real-token fraction": round(loaders["arrival"].fraction, 4),
            },
        )
    ]
    for name, loader in loaders.items():
        out.append(
            Case(
                workload="W3",
                system=titles[name],
                metric="real tokens/s",
                measure=loader.measure,
                group="aioloader",
                note=f"DataLoader(workers=0), batches of {batch_words[name]}",
                facts={
                    "batch": batch_words[name],
                    "real-token fraction": round(loader.fraction, 4),
                    "epoch plan (s)": round(loader.plan_seconds, 3),
                },
            )
        )
    return out


# -- the workload, as run.py crosses it -----------------------------------------------------
NAME = "W3"
TITLE = "100,000 token sequences, log-normal lengths (median 200, cap 2,048)"
NOTES = [
    "Real-token fraction: real tokens / positions computed over a whole epoch (padding: "
    "batch size x longest sequence of the batch; packing: rows x 2,048). Epoch plan: "
    "sampler construction plus epoch 0's table (none for the shuffled sampler).",
]


def build(quick: bool, log: Callable[[str], None], stack: Any, args: Any) -> Any:
    """W3's cases and notes."""
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
