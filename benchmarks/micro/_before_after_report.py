"""The pure part of ``before_after``: per-row figures of two revisions and the markdown."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

LABELS = ("before", "after")


def summary(before: Sequence[float], after: Sequence[float]) -> dict[str, float | None]:
    """Each revision's median, min and max; after/before of the medians; and the min and max
    of the ratios of each round (the two revisions' values of one round paired; None where
    a revision has fewer values)."""
    out: dict[str, float | None] = {}
    for label, values in zip(LABELS, (before, after), strict=True):
        out[label] = statistics.median(values) if values else None
        out[f"{label}_min"] = min(values) if values else None
        out[f"{label}_max"] = max(values) if values else None
    low, high = out["before"], out["after"]
    out["ratio"] = high / low if low and high is not None else None
    paired = len(before) == len(after)  # else a round failed: which values pair is unknown
    rounds = [a / b for b, a in zip(before, after, strict=False) if b] if paired else []
    out["round_ratio_min"] = min(rounds) if rounds else None
    out["round_ratio_max"] = max(rounds) if rounds else None
    return out


def geometric_mean(ratios: Sequence[float]) -> float | None:
    """The geometric mean of ``ratios`` (None when there are none)."""
    return statistics.geometric_mean(ratios) if ratios else None


def _short(text: str, most: int = 100) -> str:
    """``text`` cut to ``most`` characters (ending with ``...`` where cut)."""
    return text if len(text) <= most else text[: most - 3].rstrip() + "..."


def _cell(value: float | None, spec: str, suffix: str = "") -> str:
    return "n/a" if value is None else format(value, spec) + suffix


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown lines: a row per aioloader row with both medians, their min-max, after/before
    and the per-round ratios' min-max; then a line per workload: the geometric mean."""
    lines = [
        "| workload | row | unit | before (median) | before min-max | after (median) "
        "| after min-max | after/before | per round min-max |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    by_workload: dict[str, list[float]] = {}
    for row in rows:
        s = row["summary"]
        spread = {
            label: f"{_cell(s[f'{label}_min'], ',.1f')}-{_cell(s[f'{label}_max'], ',.1f')}"
            for label in LABELS
        }
        ratios = f"{_cell(s['round_ratio_min'], '.3f')}-{_cell(s['round_ratio_max'], '.3f')}"
        lines.append(
            f"| {row['workload']} | {row['system']} | {row['metric']} "
            f"| {_cell(s['before'], ',.1f')} | {spread['before']} | {_cell(s['after'], ',.1f')} "
            f"| {spread['after']} | {_cell(s['ratio'], '.3f', 'x')} | {ratios} |"
        )
        if s["ratio"] is not None:
            by_workload.setdefault(row["workload"], []).append(s["ratio"])
    lines.append("")
    for row in rows:
        for label, error in row["errors"].items():
            lines.append(f"{row['workload']} {row['system']}: {label} FAILED: {error}.  ")
    for workload, ratios_of in by_workload.items():
        mean = _cell(geometric_mean(ratios_of), ".3f", "x")
        lines.append(
            f"{workload}: after/before, geometric mean over {len(ratios_of)} rows: {mean}.  "
        )
    return lines


def _machine(facts: dict[str, Any]) -> str:
    """One line: the machine, Python, the packages the rows use, the load at both ends."""
    used = ("aioloader", "numpy", "numba", "pillow", "anyio", "uvloop", "torch")
    packages = ", ".join(f"{k} {v}" for k, v in facts["packages"].items() if k in used)
    cores = f"{facts['cores']} cores ({facts['usable_cores']} usable)"
    parts = [
        f"Machine: {facts['cpu']}, {cores}, {facts['memory_gib']} GiB, {facts['platform']}",
        f"{facts['python']} with {packages}",
        f"load average (1, 5, 15 min) {facts['load_average_start']} at the start and "
        f"{facts.get('load_average_end')} at the end.",
    ]
    return "; ".join(parts)


def markdown(data: dict[str, Any]) -> str:
    """The results document: the command, both revisions, the machine, the check, the table."""
    machine, settings = data["machine"], data["settings"]
    before, after = settings["before"], settings["after"]
    lines = [
        "# aioloader before and after: the aioloader rows of " + ", ".join(settings["workloads"]),
        "",
        f"Command: `{settings['command']}`  ",
        f"Before: {before['revision']} ({before['commit']}): {_short(before['subject'])}  ",
        f"After: the working tree at {after['commit']}{after['changes']}.  ",
        f"Date (UTC): {machine['date_utc']}; rounds: {settings['rounds']}, the two revisions "
        "alternating which runs first; each in a fresh process per round (W6: per row); the "
        f"run took {settings['seconds']:.0f} s; kernels: {settings['kernels']}.  ",
        _machine(machine),
        "",
        "Both revisions run this tree's benchmark code on the same data; only the aioloader "
        "package differs. Before timing, each row's batches gave the same digest on both "
        f"({data['checked']}). Values are medians of the rounds with their min-max; "
        "after/before > 1 means the working tree is faster.",
        "",
        *table(data["rows"]),
    ]
    return "\n".join(lines).rstrip() + "\n"
