"""The serving report's Markdown and its latency-by-load plot (every load point, per arm the pooled p50 with the blocks'
spread and the pooled p99). Reads only the serving-report.v1 document; one unit (seconds) in every latency table."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .. import contract
from .metrics import VERDICT_METRICS


def _s(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}%"


def markdown(doc: Mapping[str, Any]) -> str:
    lines = [f"# Serving A/B: {doc['verdict']}", "",
             f"- model: `{doc['model_path']}` (sglang {doc['engine_version']})",
             f"- status: **{doc['status']}**" + ("" if not doc["reasons"] else ": " + "; ".join(doc["reasons"])),
             f"- blocks: {doc['settings']['block_order']}; {doc['settings']['rounds']} round(s), "
             f"{doc['settings']['requests_per_block'] or 'duration-bound'} requests per block, seed "
             f"{doc['settings']['seed']}"]
    poll = doc["settings"].get("video_poll_s")
    if poll:
        lines.append(f"- requests: text-to-video jobs (`{doc['settings']['endpoint']}`), each polled every "
                     f"{poll * 1000:g} ms: a latency is at most that late")
    source = doc["requests_source"]
    if source.get("kind") == "manifest":
        lines.append(f"- requests: `{source['path']}` (sha256 {source['sha256'][:12]}…, {source['requests']} "
                     f"requests, shapes {', '.join(source['shapes'])})")
    for arm, info in doc["arms"].items():
        flags = " ".join(info["args"]) or "(no extra flags)"
        lines.append(f"- arm {arm}: `{flags}` — {info['status']}, healthy after {_s(info['healthy_after_s'], 1)} s, "
                     f"log `{info['log']}`")
    lines += ["", "## Latency and throughput (s; percentiles pooled over every request of the arm at the load; "
              "names as in sglang's bench_serving)", "",
              "| load | arm | p50 | p90 | p95 | p99 | mean | throughput_qps | goodput_qps | failed |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for point in doc["load_points"]:
        for arm, m in point["arms"].items():
            lines.append(f"| {point['label']} | {arm} | {_s(m['latency_p50'])} | {_s(m['latency_p90'])} | "
                         f"{_s(m['latency_p95'])} | {_s(m['latency_p99'])} | {_s(m['latency_mean'])} | "
                         f"{_g(m['throughput_qps'])} | {_g(m.get('goodput_qps'))} | {m['failed_requests']} |")
    contended = [f"{p['label']}: {len(p['contended_blocks'])}/{len(p['blocks'])}" for p in doc["load_points"]
                 if p["contended_blocks"]]
    if contended:
        lines += ["", "Blocks run while other processes kept the host busy (their spread is not the change's): "
                  + "; ".join(contended) + "."]
    conf = f"{doc['settings']['confidence'] * 100:.4g}%"
    lines += ["", f"## Verdicts (B against A: the change of the mean over blocks of each block's figure, {conf} "
              "interval by bootstrap over blocks)", "",
              "| load | metric | change | interval | verdict | noise floor (min. detectable) | why |",
              "|---|---|---|---|---|---|---|"]
    for point in doc["load_points"]:
        for name, _ in VERDICT_METRICS:
            c = point["comparison"][name]
            floor = c["noise_floor"]
            lines.append(f"| {point['label']} | {name} | {_pct(c['change_pct'])} | {_interval(c)} | {c['verdict']} | "
                         f"{_s(floor.get('min_detectable_effect_pct'), 2)}% | {c['reason']} |")
    lines += ["", "## Per shape (s: the mean over blocks of each block's p50 for that shape; B against A)", "",
              "| load | shape | requests | A | B | change | interval | verdict |", "|---|---|---|---|---|---|---|---|"]
    for point in doc["load_points"]:
        for row in point["shapes"]:
            lines.append(f"| {point['label']} | {row['shape']} | {row['requests']} | "
                         f"{_s(_seconds(row['baseline_p50_ms']))} | {_s(_seconds(row['candidate_p50_ms']))} | "
                         f"{_pct(row['change_pct'])} | {_interval(row)} | {row['verdict']} |")
    lines += ["", "## Output identity", "", *(_identity_line(point) for point in doc["load_points"])]
    if doc.get("plot"):
        lines += ["", f"![latency vs load]({Path(doc['plot']).name})"]
    return "\n".join(lines) + "\n"


def _g(value: float | None) -> str:
    """Four significant figures: enough that two rates a change sets apart never print alike."""
    return "—" if value is None else f"{value:.4g}"


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000


def _interval(row: Mapping[str, Any]) -> str:
    if row["ci_low_pct"] is None:
        return row.get("interval_reason") or "—"
    return f"[{_pct(row['ci_low_pct'])}, {_pct(row['ci_high_pct'])}]"


def _identity_line(point: Mapping[str, Any]) -> str:
    """Where outputs differ, and what that means for the verdict: a difference between the arms is the change
    altering outputs; one within an arm is that arm's own nondeterminism, which no comparison can see past."""
    ident = point["output_identity"]
    head = f"- {point['label']}: over {ident['compared_requests']} request id(s)"
    if ident["identical"]:
        return f"{head}, every output of both arms has the same bytes."
    parts = []
    for arm, ids in ident["unstable_within_arm"].items():
        if ids:
            parts.append(f"arm {arm} wrote different bytes for the same request across its own blocks "
                         f"({', '.join(ids)}): its outputs are not reproducible under its settings (batching or "
                         "scheduling can change numerics), so no byte comparison with the other arm means anything")
    if ident["differ_between_arms_only"]:
        parts.append(f"each arm is stable but the arms differ ({', '.join(ident['differ_between_arms_only'])}): the "
                     "change alters the output, so the latency verdict compares two different computations; claim a "
                     "speed-up only with a quality check that accepts the difference")
    return f"{head}, outputs differ: " + "; ".join(parts) + ". The timing verdict above is about latency only."


def plot(doc: Mapping[str, Any], path: Path) -> Path | None:
    """Every load point (request rates and concurrency alike, in run order), per arm: the pooled p50 with the spread
    of the blocks' p50s (min to max) as an error bar, and the pooled p99. None without a load point."""
    points = doc["load_points"]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.15
    for i, arm in enumerate(doc["arms"]):
        for x, point in enumerate(points):
            pooled = point["arms"][arm]
            blocks = [b["metrics"]["latency_p50"] for b in point["blocks"] if b["arm"] == arm
                      and b["metrics"]["latency_p50"] is not None]
            if pooled["latency_p50"] is None or not blocks:
                continue
            at = x + (i - 0.5) * 2 * width
            p50 = pooled["latency_p50"]
            ax.errorbar([at], [p50], yerr=[[p50 - min(blocks)], [max(blocks) - p50]], marker="o", color=f"C{i}",
                        capsize=3, label=f"{arm} p50 (bar: blocks' p50 min-max)" if x == 0 else None)
            if pooled["latency_p99"] is not None:
                ax.plot([at], [pooled["latency_p99"]], marker="^", color=f"C{i}", linestyle="none",
                        label=f"{arm} p99" if x == 0 else None)
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels([p["label"] for p in points], fontsize="small")
    ax.set_xlabel("load point (request rate or concurrency, in run order)")
    ax.set_ylabel("latency (s), pooled over the arm's requests")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    ax.set_title(f"serving A/B: {doc['verdict']}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


def write_files(doc: dict[str, Any], output_dir: Path) -> None:
    """The plot, then (with their paths in ``doc``, checked against its schema) report.md and report.json."""
    drawn = plot(doc, output_dir / "latency_vs_rate.png")
    doc["plot"] = str(drawn) if drawn else None
    doc["markdown"] = str(output_dir / "report.md")
    contract.check_document(doc)
    (output_dir / "report.md").write_text(markdown(doc), encoding="utf-8")
    (output_dir / "report.json").write_text(contract.dumps(doc) + "\n", encoding="utf-8")
