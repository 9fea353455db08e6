"""The reports of a run: machine facts, ``results.json``, ``results.md`` and the plot."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
import textwrap
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import Case, ratio, reference_of

PACKAGES = (  # the packages whose versions a report names
    "aioloader numpy numba pillow anyio uvloop trio torch torchdata spdl grain matplotlib "
    "img2dataset webdataset aiohttp"
)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_facts() -> dict[str, Any]:
    """Cores, CPU, memory, Python, package versions and the load average now."""
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        found = re.search(r"^model name\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = found[1].strip() if found else cpu
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None  # Linux
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": len(usable) if usable is not None else os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1),
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "packages": {name: _version(name) for name in PACKAGES.split()},
        "load_average_start": load_average(),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def to_json(
    cases: Sequence[Case],
    facts: dict[str, Any],
    settings: dict[str, Any],
    targets: list[dict[str, Any]],
    notes: dict[str, list[str]],
) -> dict[str, Any]:
    """Everything of a run, as plain data."""
    rows = []
    for case in cases:
        base = reference_of(cases, case)
        names = ("workload", "system", "group", "metric", "higher_is_better", "baseline")
        row = {name: getattr(case, name) for name in names}
        row.update(ratio_to_baseline=ratio(case, base), compared_to=base.system if base else None)
        row.update(note=case.note, facts=case.facts, error=case.error, **case.summary())
        rows.append(row)
    return {
        "machine": facts,
        "settings": settings,
        "results": rows,
        "targets": targets,
        "notes": notes,
    }


def _number(value: float | None, metric: str = "") -> str:
    if value is None:
        return "n/a"
    if metric.startswith("ms") or metric.endswith("(ms)"):
        return f"{value:,.3f}" if value < 10 else f"{value:,.1f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}" if abs(value) >= 1 else f"{value:.3g}"


def _cells(row: dict[str, Any], keys: list[str]) -> list[str]:
    """A results row as table cells: name, median, min-max, ratio, then its ``keys`` facts."""
    cells = [row["system"] + (" (baseline)" if row["baseline"] else "")]
    if row["error"]:
        cells += ["failed", row["error"][:80], "n/a"]
    else:
        low, high = (_number(row[k], row["metric"]) for k in ("min", "max"))
        cells += [_number(row["median"], row["metric"]), f"{low}-{high}"]
        ratio = row["ratio_to_baseline"]
        if ratio is None:
            cells.append("n/a")
        else:
            cells.append(f"{ratio:.2f}x" if ratio < 10_000 else f"{ratio:.2g}x")
    return cells + [_fact(row["facts"].get(key)) for key in keys]


def _fact(value: Any) -> str:
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def to_markdown(data: dict[str, Any], titles: dict[str, str]) -> str:
    """The results as a markdown document: header, one table per workload, targets."""
    machine, settings = data["machine"], data["settings"]
    packages = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    lines = [
        "# aioloader benchmarks",
        "",
        f"Command: `{settings['command']}`  ",
        f"Date (UTC): {machine['date_utc']}; {settings['rounds']} rounds after a dropped "
        f"warm-up round, systems interleaved in every round; run took "
        f"{settings['seconds']:.0f} s.  ",
        f"Machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} "
        f"usable), {machine['memory_gib']} GiB; {machine['platform']}.  ",
        f"Python: {machine['python']}; {packages}.  ",
        f"Load average (1, 5, 15 min): {machine['load_average_start']} at the start, "
        f"{machine.get('load_average_end')} at the end.",
        "",
        "Values are medians of the kept rounds with their min-max; ratios are medians "
        "divided by the workload's baseline row (> 1 is better, also for times).",
    ]
    for workload, title in titles.items():
        mine = [r for r in data["results"] if r["workload"] == workload]
        if not mine:
            continue
        keys = list(dict.fromkeys(key for r in mine for key in r["facts"]))
        header = ["system", mine[0]["metric"] + " (median)", "min-max", "vs baseline", *keys]
        lines += ["", f"## {workload}: {title}", "", "| " + " | ".join(header) + " |"]
        lines.append("|---|" + "---:|" * (len(header) - 1))
        lines += ["| " + " | ".join(_cells(r, keys)) + " |" for r in mine]
        for note in data["notes"].get(workload, []):
            lines += ["", note]
    if data["targets"]:
        lines += ["", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
        for t in data["targets"]:
            met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
            lines.append(f"| {t['target']} | {t['measured']} | {met} |")
    return "\n".join(lines) + "\n"


def plot(path: Path, data: dict[str, Any], titles: dict[str, str]) -> bool:
    """A PNG, one panel per workload of ``titles`` (in order); False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if r["median"] is not None]
    panels = {w: [r for r in rows if r["workload"] == w] for w in titles}
    panels = {w: mine for w, mine in panels.items() if mine}
    colors = {group: f"C{i}" for i, group in enumerate(dict.fromkeys(r["group"] for r in rows))}
    heights = [max(2.0, 0.38 * len(mine) + 1.0) for mine in panels.values()]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(10, sum(heights) + 0.6), height_ratios=heights, squeeze=False
    )
    for ax, (workload, mine) in zip(axes[:, 0], panels.items(), strict=True):
        y = range(len(mine) - 1, -1, -1)
        spread = [[r["median"] - r["min"] for r in mine], [r["max"] - r["median"] for r in mine]]
        bars = [r["median"] for r in mine]
        ax.barh(y, bars, xerr=spread, color=[colors[r["group"]] for r in mine], capsize=3)
        ax.set_yticks(y, [r["system"] for r in mine], fontsize=8)
        ax.set_xlabel(mine[0]["metric"] + " (median, min-max)", fontsize=9)
        ax.set_xscale("log" if workload == "W4" else "linear")  # W4: 10^-3 s against 10^5 s
        ax.set_title(textwrap.fill(f"{workload}: {titles[workload]}", 80), fontsize=9, loc="left")
    machine = data["machine"]
    title = f"{machine['cpu']}, {machine['usable_cores']} cores, {machine['python']}"
    fig.suptitle(f"aioloader benchmarks: {title}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
