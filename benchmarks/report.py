"""The reports of a run: machine facts, ``results.json``, ``results.md`` and the plot."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import textwrap
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import Case, ratio, reference_of

# The packages whose versions a report names.
PACKAGES = [
    "aioloader",
    "numpy",
    "numba",
    "pillow",
    "anyio",
    "uvloop",
    "trio",
    "torch",
    "torchdata",
    "spdl",
    "grain",
    "matplotlib",
    "img2dataset",
    "webdataset",
    "aiohttp",
]


# -- machine facts ----------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_facts() -> dict[str, Any]:
    """Cores, CPU, memory, Python, package versions and the load average now."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    memory = None
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = round(pages * page_size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": memory,
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "packages": {name: _version(name) for name in PACKAGES},
        "load_average_start": load_average(),
    }


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# -- reports ----------------------------------------------------------------------------
def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "n/a"
    if metric.startswith("ms") or metric.endswith("(ms)"):
        return f"{value:,.3f}" if value < 10 else f"{value:,.1f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def _ratio_text(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}x" if value < 10_000 else f"{value:.2g}x"


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
        rows.append(
            {
                "workload": case.workload,
                "system": case.system,
                "group": case.group,
                "metric": case.metric,
                "higher_is_better": case.higher_is_better,
                "baseline": case.baseline,
                "ratio_to_baseline": ratio(case, base),
                "compared_to": base.system if base is not None else None,
                "note": case.note,
                "facts": case.facts,
                "error": case.error,
                **case.summary(),
            }
        )
    return {
        "machine": facts,
        "settings": settings,
        "results": rows,
        "targets": targets,
        "notes": notes,
    }


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
    rows = data["results"]
    for workload, title in titles.items():
        mine = [r for r in rows if r["workload"] == workload]
        if not mine:
            continue
        lines += ["", f"## {workload}: {title}", ""]
        fact_keys: list[str] = []
        for r in mine:
            for key in r["facts"]:
                if key not in fact_keys:
                    fact_keys.append(key)
        header = ["system", mine[0]["metric"] + " (median)", "min-max", "vs baseline"]
        lines.append("| " + " | ".join(header + fact_keys) + " |")
        lines.append("|" + "---|" + "---:|" * (len(header) - 1 + len(fact_keys)))
        for r in mine:
            name = r["system"] + (" (baseline)" if r["baseline"] else "")
            if r["error"]:
                cells = [name, "failed", r["error"][:80], "n/a"]
            else:
                cells = [
                    name,
                    _fmt(r["median"], r["metric"]),
                    f"{_fmt(r['min'], r['metric'])}-{_fmt(r['max'], r['metric'])}",
                    _ratio_text(r["ratio_to_baseline"]),
                ]
            cells += [_fact(r["facts"].get(key)) for key in fact_keys]
            lines.append("| " + " | ".join(cells) + " |")
        for note in data["notes"].get(workload, []):
            lines.append("")
            lines.append(note)
    if data["targets"]:
        lines += ["", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
        for t in data["targets"]:
            met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
            lines.append(f"| {t['target']} | {t['measured']} | {met} |")
    return "\n".join(lines) + "\n"


def _fact(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return _fmt(value, "")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented JSON."""
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def python_command() -> str:
    """The command line that started this process, as a person would type it."""
    argv = [Path(sys.argv[0]).as_posix(), *sys.argv[1:]]
    return "python " + " ".join(argv)


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


def plot(path: Path, data: dict[str, Any], titles: dict[str, str]) -> bool:
    """A PNG with one panel per workload of ``titles`` (in its order); False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if r["median"] is not None]
    panels = [w for w in titles if any(r["workload"] == w for r in rows)]
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
        title = textwrap.fill(f"{workload}: {titles[workload]}", 80)
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
