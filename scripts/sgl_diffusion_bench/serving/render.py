"""The serving report's Markdown and its latency-vs-request-rate plot (one line per arm at p50 and p99, the band
between them filled). Reads only the serving-report.v1 document."""

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
    source = doc["requests_source"]
    if source.get("kind") == "manifest":
        lines.append(f"- requests: `{source['path']}` (sha256 {source['sha256'][:12]}…, {source['requests']} "
                     f"requests, shapes {', '.join(source['shapes'])})")
    for arm, info in doc["arms"].items():
        flags = " ".join(info["args"]) or "(no extra flags)"
        lines.append(f"- arm {arm}: `{flags}` — {info['status']}, healthy after {_s(info['healthy_after_s'], 1)} s, "
                     f"log `{info['log']}`")
    lines += ["", "## Latency and throughput (seconds; names as in sglang's bench_serving)", "",
              "| load | arm | p50 | p90 | p95 | p99 | mean | throughput_qps | goodput_qps | failed |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for point in doc["load_points"]:
        for arm, m in point["arms"].items():
            lines.append(f"| {point['label']} | {arm} | {_s(m['latency_p50'])} | {_s(m['latency_p90'])} | "
                         f"{_s(m['latency_p95'])} | {_s(m['latency_p99'])} | {_s(m['latency_mean'])} | "
                         f"{_s(m['throughput_qps'], 2)} | {_s(m.get('goodput_qps'), 2)} | {m['failed_requests']} |")
    contended = [f"{p['label']}: {len(p['contended_blocks'])}/{len(p['blocks'])}" for p in doc["load_points"]
                 if p["contended_blocks"]]
    if contended:
        lines += ["", "Blocks run while other processes kept the host busy (their spread is not the change's): "
                  + "; ".join(contended) + "."]
    lines += ["", "## Verdicts (B against A, bootstrap over blocks)", "",
              "| load | metric | change (mean of blocks) | interval | verdict | noise floor (min. detectable) | why |",
              "|---|---|---|---|---|---|---|"]
    for point in doc["load_points"]:
        for name, _ in VERDICT_METRICS:
            c = point["comparison"][name]
            floor = c["noise_floor"]
            interval = "—" if c["ci_low_pct"] is None else f"[{_pct(c['ci_low_pct'])}, {_pct(c['ci_high_pct'])}]"
            lines.append(f"| {point['label']} | {name} | {_pct(c['change_pct'])} | {interval} | {c['verdict']} | "
                         f"{_s(floor.get('min_detectable_effect_pct'), 2)}% | {c['reason']} |")
    lines += ["", "## Per shape (median latency, ms, B against A)", "",
              "| load | shape | requests | A p50 | B p50 | change | interval | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for point in doc["load_points"]:
        for row in point["shapes"]:
            interval = "—" if row["ci_low_pct"] is None else f"[{_pct(row['ci_low_pct'])}, {_pct(row['ci_high_pct'])}]"
            lines.append(f"| {point['label']} | {row['shape']} | {row['requests']} | {_s(row['baseline_p50_ms'], 1)} | "
                         f"{_s(row['candidate_p50_ms'], 1)} | {_pct(row['change_pct'])} | {interval} | "
                         f"{row['verdict']} |")
    lines += ["", "## Output identity", ""]
    for point in doc["load_points"]:
        ident = point["output_identity"]
        lines.append(f"- {point['label']}: {'identical' if ident['identical'] else 'DIFFERENT'} over "
                     f"{ident['compared_requests']} request id(s)" +
                     (f"; differing: {', '.join(ident['differing_request_ids'])}" if ident["differing_request_ids"]
                      else ""))
    if doc.get("plot"):
        lines += ["", f"![latency vs request rate]({Path(doc['plot']).name})"]
    return "\n".join(lines) + "\n"


def plot(doc: Mapping[str, Any], path: Path) -> Path | None:
    """p50 and p99 latency against the request rate, per arm; None when no open-loop load point ran."""
    rated = [p for p in doc["load_points"] if p["load"]["kind"] == "request_rate"]
    if not rated:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, arm in enumerate(doc["arms"]):
        rows = sorted((p["load"]["value"], p["arms"][arm]["latency_p50"], p["arms"][arm]["latency_p99"])
                      for p in rated if p["arms"][arm]["latency_p50"] is not None)
        if not rows:
            continue
        rates, p50, p99 = zip(*rows, strict=True)
        ax.plot(rates, p50, marker="o", color=f"C{i}", label=f"{arm} p50")
        ax.plot(rates, p99, marker="^", linestyle="--", color=f"C{i}", label=f"{arm} p99")
        ax.fill_between(rates, p50, p99, color=f"C{i}", alpha=0.15)
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel("latency (s)")
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
