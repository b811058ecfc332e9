"""The sweep report's Markdown and its latency-vs-memory Pareto plot per arm (matplotlib, from the report extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..results import perf_compare


def _fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}" if isinstance(value, float) else f"{value}{suffix}"


def change_cell(row: dict[str, Any]) -> str:
    """The shard's one change with its one interval at the confidence its campaign stated, or why it has none."""
    if row["change_pct"] is None:
        return "-"
    return perf_compare.change_text(row["change_pct"], row["ci_low_pct"], row["ci_high_pct"], row["confidence"],
                                    row["interval_reason"], digits=2)


def _host_cell(row: dict[str, Any]) -> str:
    host = row["host"]
    if not host or not host["sampled_cells"]:
        return "not sampled"
    contended = host["contended_cells"]
    return f"{len(contended)}/{host['sampled_cells']} contended" + (f" (cells {', '.join(map(str, contended))})"
                                                                     if contended else "")


def _shard_name(row: dict[str, Any]) -> str:
    what = ", ".join(f"{k}={v}" for k, v in sorted(row["overrides"].items())) or "preset as is"
    return f"{row['id']} ({what})"


def markdown(report: dict[str, Any], plots: dict[str, str], absent: dict[str, str]) -> str:
    counts = report["counts"]
    lines = [f"# Sweep {report['name']}", "",
             f"{len(report['shards'])} shards: " + ", ".join(f"{n} {s}" for s, n in counts.items()), ""]
    for preset in dict.fromkeys(r["preset"] for r in report["shards"]):
        lines += [f"## {preset}", "", "| shard (overrides) | status | verdict | change of means | why | arm: mean e2e "
                  "ms, allocated MB | valid cells | host | nightly baseline |", "|---|---|---|---|---|---|---|---|---|"]
        for row in (r for r in report["shards"] if r["preset"] == preset):
            arms = "; ".join(f"{a}: {_fmt(s['e2e_ms'])}, {_fmt(s['peak_memory_mb'], 0)}"
                             for a, s in row["arms"].items()) or "-"
            valid = sum(c["status"] == "valid" for c in row["cells"])
            why = (row["verdict_reason"] or "-").replace("|", "/")
            lines.append(f"| {_shard_name(row)} | {row['status']} | {row['verdict'] or '-'} | {change_cell(row)} | "
                         f"{why} | {arms} | {valid}/{len(row['cells'])} | {_host_cell(row)} | {_nightly_cell(row)} |")
        lines.append("")
    if report["failures"]:
        lines += ["## Not finished or not valid", ""]
        lines += [f"- {f['id']} ({f['status']}): {f['reason']}" for f in report["failures"]]
        lines.append("")
    if report["baseline_regressions"]:
        lines += ["## Over the nightly baseline (the sweep fails)", ""]
        lines += [f"- {r['id']} {r['arm']}: {r['scenario']} on {r['gpu_class']}, e2e {_fmt(r['change_pct'], 1, '%')}"
                  f"; over: {', '.join(r['over']) or 'e2e'}" for r in report["baseline_regressions"]]
        lines.append("")
    lines += _nightly_section(report)
    if plots or absent:
        lines += ["## Latency vs allocated memory", ""] + [f"![{arm}]({Path(p).name})" for arm, p in plots.items()]
        lines += [f"No plot for arm {arm}: {why}." for arm, why in absent.items()]
    return "\n".join(lines) + "\n"


def _nightly_cell(row: dict[str, Any]) -> str:
    parts = [f"{arm}: {c['status']}" + (f" ({c['change_pct']:+.1f}%)" if c["change_pct"] is not None else "")
             for arm, c in row["nightly"].items()]
    return "; ".join(parts) or "-"


def _nightly_line(shard: str, arm: str, c: dict[str, Any]) -> str:
    if c["status"] in ("pass", "fail"):
        over = f"; over: {', '.join(c['over'])}" if c["over"] else ""
        return (f"- {shard} {arm}: {c['status'].upper()} against {c['scenario']} on {c['gpu_class']} "
                f"({c['profile']} tolerances): e2e {_fmt(c['e2e_ms'])} ms vs baseline {_fmt(c['baseline_e2e_ms'])} "
                f"ms ({_fmt(c['change_pct'], 1, '%')}, limit {_fmt(c['limit_ms'])} ms){over}")
    return f"- {shard} {arm}: {c['status']}: {c['reason']}"


def _nightly_section(report: dict[str, Any]) -> list[str]:
    """Each arm of each shard against the engine's nightly perf baseline of its scenario and GPU class."""
    lines = [_nightly_line(r["id"], arm, c) for r in report["shards"] for arm, c in r["nightly"].items()]
    return ["## Nightly baseline (the engine's perf_baselines)", "", *lines, ""] if lines else []


def pareto(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Points no other point beats on both memory and latency (lower is better), by memory."""
    return sorted(p for p in points if not any(q[0] <= p[0] and q[1] <= p[1] and q[:2] != p[:2] for q in points))


def plots(report: dict[str, Any], out_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """One PNG per arm that has points: every shard's mean E2E against its allocated memory, the Pareto front
    joined; and, for each arm without one, why (no empty plot is written)."""
    arms = dict.fromkeys(a for r in report["shards"] for a in r["arms"])
    points_of = {arm: [(s["peak_memory_mb"], s["e2e_ms"], r["id"]) for r in report["shards"]
                       if (s := r["arms"].get(arm)) and s["e2e_ms"] is not None and s["peak_memory_mb"] is not None]
                 for arm in arms}
    absent = {arm: "no shard measured allocated memory for it (a CPU run records none)"
              for arm, points in points_of.items() if not points}
    try:
        import matplotlib
    except ImportError:
        return {}, {**absent, **{arm: "matplotlib is not installed" for arm in points_of if arm not in absent}}
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = {}
    for arm, points in points_of.items():
        if not points:
            continue
        fig, ax = plt.subplots(figsize=(7, 5))
        ax.scatter([p[0] for p in points], [p[1] for p in points], color="C0")
        for x, y, name in points:
            ax.annotate(name, (x, y), fontsize="x-small")
        front = pareto(points)
        ax.plot([p[0] for p in front], [p[1] for p in front], color="C3", label="Pareto front")
        ax.legend(loc="best", fontsize="small")
        ax.set_xlabel("allocated memory, mean (MB)")
        ax.set_ylabel("E2E latency, mean over the steady state (ms)")
        ax.set_title(f"{report['name']}: arm {arm}", fontsize="medium")
        ax.grid(True, alpha=0.3)
        path = out_dir / f"pareto-{arm}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written[arm] = str(path)
    return written, absent
