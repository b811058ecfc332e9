"""Render a bench-report.v1 document as PR evidence: Markdown in the style of sglang PR #38591 (run-order table,
means, per-round changes, outliers, memory, output hashes, reproduce commands, environment) and a PNG plot of every
cell's E2E and denoise by run order and arm. Everything shown comes from the document; nothing is recomputed."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping

from ..engine import engine_overlap
from . import perf_compare, request_verdicts, steady_state
from ..judging.cell import Cell

MARKDOWN_NAME = "bench-report.md"
PLOT_NAME = "bench-report.png"
MAX_TICK_LABELS = 40  # run-order labels and round separators on the plot


def _s(ms: float | None) -> str:
    return "" if ms is None else f"{ms / 1000:.6f}"


def _gib(mb: float | None) -> str:
    return "n/a" if mb is None else f"{mb / 1024:.3f} GiB"


def _arm_title(name: str, spec: Mapping[str, Any]) -> str:
    return name if not spec.get("letter") else f"{name} ({spec['letter']})"


def _round_label(cell: Cell) -> str:
    if cell.round is None:
        return cell.position or f"cell {cell.index}"
    return f"Round {cell.round} — {cell.position or cell.arm}" + (f" — `{cell.request['request_id']}`" if cell.request else "")


def cells_of(doc: Mapping[str, Any]) -> list[Cell]:
    """A bench-report.v1's cells, typed."""
    return [Cell.from_json(c) for c in doc["cells"]]


def arm_order(campaign: Mapping[str, Any], cells: list[Cell]) -> list[str]:
    """Baseline first, then candidate, then the order arms first run (the JSON's object keys are sorted)."""
    named = [campaign.get("baseline_arm"), campaign.get("candidate_arm"),
             *(o["arm"] for o in campaign["order"]), *(c.arm for c in cells), *campaign["arms"]]
    return [a for a in dict.fromkeys(named) if a in campaign["arms"]]


def _stage_order(cells: list[Cell], names) -> list[str]:
    executed = [n for c in cells if c.perf for n in c.perf.get("stage_order", [])]
    return [n for n in dict.fromkeys([*executed, *names]) if n in names]


def render_markdown(doc: Mapping[str, Any], plot_name: str | None = PLOT_NAME) -> str:
    campaign, summary, cells = doc["campaign"], doc["summary"], cells_of(doc)
    arms = arm_order(campaign, cells)
    comparison = summary.get("comparison")
    lines = [f"## Benchmark: {campaign['label']}", ""]
    lines += [f"- Mode {campaign['mode']}, {campaign['rounds']} round(s), preset `{campaign.get('preset') or '-'}`; "
              f"{sum(1 for c in cells if c.valid)} of {len(cells)} cells valid."]
    lines += _request(doc)
    lines += _standins(doc, cells)
    for name in arms:
        spec = campaign["arms"][name]
        extra = " ".join(spec.get("extra_args") or []) or "no extra args"
        lines.append(f"- Arm {_arm_title(name, spec)}: {spec['description']}; quality {spec.get('quality') or 'default'}"
                     f", BCG {'on' if spec.get('bcg') else 'off'}; `{extra}`.")
    lines.append("- E2E is the engine's warmed request duration from the perf dump (`total_duration_ms`); denoise "
                 "sums the stages ending in DenoisingStage/RefinementStage (else the per-step records).")
    lines += _engine_settings(doc, arms)
    lines += _engines(doc.get("engines") or {})
    lines += ["", *_run_order_table(cells, arms), ""]
    for paragraph in [*_changes(comparison), *_outliers(summary, arms), *_memory(comparison, summary, arms)]:
        lines += [paragraph, ""]
    lines += [*steady_state.markdown(summary, arms), *request_verdicts.markdown(summary, campaign.get("manifest"))]
    if comparison is not None:
        lines += ["", "### Statistics", "", *perf_compare.render_statistics(comparison, summary["arms"])]
        lines += ["", "### Stages (mean ms)", "", "| Stage | " + " | ".join(
            [comparison["baseline_arm"], comparison["candidate_arm"]]) + " | Change |", "|---|---:|---:|---:|"]
        rows = [(name, comparison["stages"][name]) for name in _stage_order(cells, comparison["stages"])]
        rows += [(label, comparison["steps"][key]) for key, label in (
            ("step0_ms", "Step 0"), ("steady_step_mean_ms", "Steady step (mean of steps >= 1)"))]
        for label, row in rows:
            pct = "n/a" if row["change_pct"] is None else f"{row['change_pct']:+.3f}%"
            lines.append(f"| {label} | {_ms(row['baseline_mean_ms'])} | {_ms(row['candidate_mean_ms'])} | {pct} |")
    lines += [*_invalid(cells), *_host(summary.get("host_contention")), *_output_quality(summary.get("output_quality"))]
    if plot_name:
        lines += ["", f"![E2E and denoise of every cell by run order]({plot_name})"]
    lines += _reproduce(doc, cells)
    lines += _environment(doc)
    return "\n".join(lines).rstrip() + "\n"


def run_order_section(doc: Mapping[str, Any]) -> list[str]:
    """The seed PR's run-order table with its means, then the per-round changes and outliers, for other reports
    (collect_pr_evidence's EVIDENCE.md) to state exactly as this one does."""
    cells = cells_of(doc)
    arms = arm_order(doc["campaign"], cells)
    lines = [*_run_order_table(cells, arms), ""]
    for paragraph in [*_changes(doc["summary"].get("comparison")), *_outliers(doc["summary"], arms)]:
        lines += [paragraph, ""]
    host = _host(doc["summary"].get("host_contention"))[3:]  # the paragraph, without its heading
    return lines + [*host, ""] if host else lines


def output_quality_section(doc: Mapping[str, Any]) -> list[str]:
    return _output_quality(doc["summary"].get("output_quality"))[3:]


def _request(doc: Mapping[str, Any]) -> list[str]:
    """What was asked of the preset: the model it ran, the fields changed, the extra engine flags."""
    request = (doc.get("engine") or {}).get("request")
    if not isinstance(request, dict):
        return []
    overrides = ", ".join(f"{k}={v}" for k, v in sorted((request.get("overrides") or {}).items()))
    extra = " ".join(request.get("extra_args") or [])
    return [f"- Model `{request.get('model')}` on {request.get('num_gpus')} GPU(s); overrides: "
            f"{overrides or 'none'}; extra engine args: " + (f"`{extra}`" if extra else "none") + "."]


SETTING_LABELS = (("attention_backend", "attention"), ("warmup_mode", "warm-up mode"), ("warmup", "warm-up"),
                  ("warmup_resolutions", "warm-up resolutions"), ("enable_breakable_cuda_graph", "BCG"),
                  ("enable_torch_compile", "torch.compile"), ("component_residency", "residency"),
                  ("dit_cpu_offload", "DiT offload"), ("dit_layerwise_offload", "DiT layerwise offload"),
                  ("text_encoder_cpu_offload", "text-encoder offload"), ("vae_cpu_offload", "VAE offload"),
                  ("num_gpus", "GPUs"), ("tp_size", "TP"), ("performance_mode", "performance mode"))


def _setting(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "{}"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return "off" if value is False else "on" if value is True else str(value)


def _engine_settings(doc: Mapping[str, Any], arms: list[str]) -> list[str]:
    """Per arm: the settings the engine logged as in effect, and the warm-up requests it ran with their cost."""
    engine = doc.get("engine") or {}
    effective, warmups = engine.get("effective") or {}, engine.get("warmups") or {}
    if not effective and not warmups:
        return []
    lines = ["", "Engine settings in effect (the engine's own `server_args` line) and its warm-up requests:", ""]
    for arm in arms:
        settings = effective.get(arm)
        text = "; ".join(f"{label} {_setting(settings[key])}" for key, label in SETTING_LABELS
                         if settings and key in settings and settings[key] is not None) if settings else "not logged"
        warm = warmups.get(arm)
        if warm and warm["requests"]:
            kinds = dict.fromkeys(f"{w['kind']} ({w['resolution'] or 'default shape'}, "
                                  f"{w['steps'] if w['steps'] is not None else '?'} step(s))"
                                  for c in warm["per_cell"] for w in c["warmups"])
            cells = len(warm["per_cell"])
            where = "engine start(s)" if all(c["cell"] is None for c in warm["per_cell"]) else "cell(s)"
            text += (f". Warm-up by the engine itself: {warm['requests']} request(s) over {cells} {where}, "
                     f"{warm['seconds']:.1f} s in all ({warm['seconds'] / cells:.1f} s each, not in E2E): "
                     f"{'; '.join(kinds)}")
        elif warm:
            text += ". Warm-up by the engine itself: none logged"
        lines.append(f"- {arm}: {text}.")
    return lines


def standin_modules(doc: Mapping[str, Any], cells: list[Cell]) -> list[str]:
    """Modules served from a stand-in instead of the real package, by any cell's log or any engine's start."""
    found = {m for c in cells for m in (c.gates.get("log") or {}).get("standin_modules") or ()}
    found |= {m for start in (doc.get("engines") or {}).get("starts") or () for m in start.get("standin_modules", ())}
    return sorted(found)


def _standins(doc: Mapping[str, Any], cells: list[Cell]) -> list[str]:
    modules = standin_modules(doc, cells)
    return [f"- **Stand-in modules ran instead of the real packages: {', '.join(modules)}** "
            "(`engine.standin_kernels`): this is not the engine users install; no figure here stands for a real "
            "run."] if modules else []


def _engines(engines: Mapping[str, Any]) -> list[str]:
    """How the cells were served: warm or cold and why, the schedule, and the order of a warm campaign's requests."""
    if not engines.get("choice"):
        return []
    line = (f"- Engine {engines['mode']} ({engines['choice']['reason']}): {engines['engine_starts']} engine start(s), "
            f"schedule {engines['schedule'].replace('_', ' ')}")
    if engines.get("order"):
        line += "; requests in order: " + ", ".join(f"{r['position'] or r['arm']} on {r['engine']}"
                                                    for r in engines["order"])
    return [line + ".", *filter(None, [engine_overlap.summary_line(engines)])]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.3f}"


def _run_order_table(cells: list[Cell], arms) -> list[str]:
    """Run-order rows with per-arm columns, then the per-arm means over the valid cells."""
    header = ["Run order", *[f"{a} E2E (s)" for a in arms], *[f"{a} denoise (s)" for a in arms]]
    show_status = any(not c.valid for c in cells)
    if show_status:
        header.append("Status")
    table = ["| " + " | ".join(header) + " |",
             "|---|" + "---:|" * (2 * len(arms)) + ("---|" if show_status else "")]
    for cell in cells:
        perf = (cell.perf if cell.valid else None) or {}  # a cell that does not count shows no figure
        values = [_s(perf.get(key)) if cell.arm == a else "" for key in ("e2e_ms", "denoise_ms") for a in arms]
        if show_status:
            values.append(cell.status + (f": {'; '.join(cell.reasons)}" if cell.reasons else ""))
        table.append("| " + " | ".join([_round_label(cell), *values]) + " |")
    means = []
    for key in ("e2e_ms", "denoise_ms"):
        for a in arms:
            vals = [c.metric(key) for c in cells if c.arm == a and c.valid and c.metric(key) is not None]
            means.append(_s(sum(vals) / len(vals)) if vals else "n/a")
    table.append("| Mean (valid cells) | " + " | ".join(means) + (" | |" if show_status else " |"))
    return table


def _changes(comparison) -> list[str]:
    if comparison is None:
        return []
    if comparison["verdict"] == "outputs_differ":  # no mean or per-round change may be read as a speedup
        return [f"**Outputs differ: no performance verdict.** {comparison['metrics'][comparison['primary_metric']]['reason']}."]
    lines, metrics = [], comparison["metrics"]
    means = [f"{label} {_s(metrics[key]['baseline_mean'])} -> {_s(metrics[key]['candidate_mean'])} s, change "
             f"{perf_compare.change_with_interval(comparison, key)}" for key, label in
             (("e2e_ms", "E2E"), ("denoise_ms", "Denoise")) if metrics[key]["change_pct"] is not None]
    if means:
        lines.append(f"Means ({comparison['baseline_arm']} -> {comparison['candidate_arm']}): " + "; ".join(means) + ".")
    for key, label in (("e2e_change_pct", "E2E"), ("denoise_change_pct", "denoise")):
        changes = [(r["round"], r[key]) for r in comparison["rounds"] if r[key] is not None]
        if not changes:
            continue
        if all(v < 0 for _, v in changes):
            text = " and ".join(f"{-v:.3f}%" for _, v in changes)
            lines.append(f"Per-round {label} reductions are {text} (rounds {', '.join(str(r) for r, _ in changes)}).")
        else:
            text = ", ".join(f"round {r} {v:+.3f}%" for r, v in changes)
            lines.append(f"Per-round {label} changes (negative is faster): {text}.")
    return lines


def _outliers(summary, arms) -> list[str]:
    lines = []
    discarded = []
    for arm in arms:
        stats = summary["arms"].get(arm)
        if not stats:
            continue
        discarded += stats["discarded_cells"]
        for o in stats["outliers"]:
            where = f"Round {o['round']} {o['position']}" if o["round"] is not None else f"cell {o['cell']}"
            text = (f"{where} ({arm}, cell {o['cell']}) took {_s(o['value_ms'])} s E2E vs the arm median "
                    f"{_s(o['arm_median_ms'])} s (robust z {o['robust_z']:+.1f})")
            if o["attributed_stage"]:
                share = "" if o["share_of_deviation"] is None else f", {o['share_of_deviation'] * 100:.0f}% of the gap"
                text += (f"; it spent {o['stage_ms']:.3f} ms in {o['attributed_stage']} versus a median of "
                         f"{o['stage_median_ms']:.3f} ms ({o['stage_delta_ms']:+.3f} ms{share})")
            text += ". That sample was discarded." if o["discarded"] else ". That sample remains in the aggregate."
            lines.append(text)
    lines.append(f"Discarded samples: cells {', '.join(map(str, discarded))}." if discarded
                 else "No samples were discarded.")
    return lines


def _memory(comparison, summary, arms) -> list[str]:
    if comparison is not None:
        mem = comparison["memory"]
        if mem["baseline_peak_mb"] is None or mem["candidate_peak_mb"] is None:
            return ["Peak memory: not recorded by the engine in both arms (its perf dumps have no memory "
                    "checkpoints)."]
        what = _memory_words(mem["memory_kind"], mem["sources"])
        verb = "rises" if mem["change_mb"] > 0 else "falls" if mem["change_mb"] < 0 else "stays"
        return [f"{what} {verb} from {_gib(mem['baseline_peak_mb'])} to {_gib(mem['candidate_peak_mb'])} "
                f"({mem['change_pct']:+.3f}%, max over each arm's cells)."]
    lines = []
    for arm in arms:
        s = summary["arms"].get(arm)
        if s and s["peak_memory_mb"]["max"] is not None:
            lines.append(f"{arm}: {_memory_words(s['memory_kind'], [])} {_gib(s['peak_memory_mb']['max'])}.")
        elif s:
            lines.append(f"{arm}: peak memory not recorded (the engine's perf dumps have no memory checkpoints).")
    return lines


def _memory_words(kind: str | None, sources: list[str]) -> str:
    if kind == "process_rss":
        return "Peak process RSS (CPU adapter stand-in, not device memory)"
    source = " (runtime_peak checkpoint)" if sources == ["runtime_peak"] else \
        " (max over memory checkpoints)" if sources else ""
    return f"Peak reserved device memory, rank 0{source},"


def _invalid(cells: list[Cell]) -> list[str]:
    bad = [c for c in cells if not c.valid]
    if not bad:
        return []
    lines = ["", "### Cells not counted", ""]
    for c in bad:
        lines.append(f"- {_round_label(c)} ({c.arm}, cell {c.index}): {c.status}"
                     + (f" — {'; '.join(c.reasons)}" if c.reasons else ""))
    return lines


def _host(contention) -> list[str]:
    if not contention:
        return []
    return ["", "### Host load", "", ("**Contended host.** " if contention["contended_cells"] else "")
            + contention["note"] + "."]


def _output_quality(quality) -> list[str]:
    lines = ["", "### Output comparison", ""]
    if quality is None:
        return lines + ["No outputs were recorded."]
    for check in quality["checks"]:
        who = f"Request {check['request'] + 1}: " if "request" in check else ""  # a manifest's: checked per request
        if check["kind"] == "byte_identity":
            n = sum(len(g["cells"]) for g in check["groups"])
            arms = "/".join(check["arms"])
            if check["identical"]:
                lines.append(f"{who}All {n} {arms} outputs are byte-identical: SHA-256 "
                             f"{', '.join(check['groups'][0]['sha256s'])}.")
            else:
                lines.append(f"{who}Lossless outputs ({arms}) are NOT byte-identical: {len(check['groups'])} distinct "
                             f"hash set(s).")
                for g in check["groups"]:
                    lines.append(f"- {', '.join(s[:16] + '…' for s in g['sha256s'])}: cells "
                                 f"{', '.join(map(str, g['cells']))} ({'/'.join(g['arms'])})")
            if check["cells_without_outputs"]:
                lines.append(f"Valid cells without outputs: {', '.join(map(str, check['cells_without_outputs']))}.")
        else:
            t = check["thresholds"]
            lines.append(f"{who}{check['arm']} (quality {check['quality'] or 'default'}) against cell "
                         f"{check['reference']['cell']} ({check['reference']['arm']}): thresholds SSIM >= "
                         f"{t['ssim_min']} and PSNR >= {t['psnr_min_db']} dB — {'pass' if check['passed'] else 'FAIL'}.")
            lines += ["", "| Cell | SSIM | PSNR (dB) | Worst frame (SSIM) | Pass |", "|---|---:|---:|---|---|"]
            for r in check["results"]:
                psnr = "inf (identical)" if r["psnr_infinite"] else f"{r['psnr_db']:.4f}"
                worst = r["worst_frame"]
                lines.append(f"| {r['cell']} | {r['ssim']:.6f} | {psnr} | {worst['index']} ({worst['ssim']:.6f}) | "
                             f"{'yes' if r['passed'] else 'NO'} |")
            lines += [f"- {e}" for e in check["errors"]]
    return lines


def _reproduce(doc, cells: list[Cell]) -> list[str]:
    lines = ["", "### Reproduce", ""]
    reproduce = doc["plan"].get("reproduce") if isinstance(doc["plan"], dict) else None
    commands = []
    if isinstance(reproduce, list):
        commands = [(r.get("arm", ""), r["command"]) for r in reproduce if isinstance(r, dict) and r.get("command")]
    if not commands:
        seen = set()
        for cell in cells:
            if cell.arm not in seen and cell.argv:
                seen.add(cell.arm)
                commands.append((cell.arm, shlex.join(cell.argv)))
    for arm, command in commands:
        lines += [f"{arm}:", "", "```bash", command, "```", ""]
    note = doc["plan"].get("note") if isinstance(doc["plan"], dict) else None
    if note:
        lines.append(str(note))
    return lines


def _environment(doc) -> list[str]:
    lines = ["", "### Environment", ""]
    caches = doc["plan"].get("caches") if isinstance(doc["plan"], dict) else None
    if isinstance(caches, dict):
        lines.append("- caches: " + "; ".join(f"{k} {v}" for k, v in caches.items() if v not in (None, [])))
    engine = doc.get("engine") or {}
    if engine:
        adapter = engine.get("adapter")
        lines.append(f"- engine: {engine.get('version', 'unknown')} at {engine.get('path', 'unknown')}"
                     + ("; CPU adapter active (applied: " + (", ".join(adapter.get("applied", [])) or "none")
                        + "; not needed: " + (", ".join(n["id"] for n in adapter.get("not_needed", [])) or "none")
                        + ")" if isinstance(adapter, dict) and adapter.get("active") else ""))
    for key, value in (doc.get("environment") or {}).items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        lines.append(f"- {key}: {value}")
    return lines


def render_plot(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Every cell's E2E and denoise (s) by run order, one colour per arm; rounds separated; outliers ringed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = cells_of(doc)
    arms = arm_order(doc["campaign"], cells)
    outlier_cells = {o["cell"] for s in doc["summary"]["arms"].values() for o in s["outliers"]}
    fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for ax, key, label in ((axes[0], "e2e_ms", "E2E (s)"), (axes[1], "denoise_ms", "Denoise (s)")):
        for i, arm in enumerate(arms):
            points = [(n, c.metric(key) / 1000) for n, c in enumerate(cells)
                      if c.arm == arm and c.valid and c.metric(key)]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", linestyle="none", color=f"C{i}", label=arm)
            ringed = [(n, c.metric(key) / 1000) for n, c in enumerate(cells)
                      if c.arm == arm and c.index in outlier_cells and c.metric(key)]
            if ringed:
                ax.plot(*zip(*ringed, strict=True), marker="o", markersize=14, markerfacecolor="none", linestyle="none",
                        color="red")
        for n, c in enumerate(cells):
            if not c.valid:
                ax.axvline(n, color="grey", linestyle=":", linewidth=1)
        for n in range(1, len(cells) if len({c.round for c in cells}) <= MAX_TICK_LABELS else 0):
            if cells[n].round != cells[n - 1].round:
                ax.axvline(n - 0.5, color="black", linewidth=0.8, alpha=0.4)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    if any(c.valid for c in cells):
        axes[0].legend(loc="best", fontsize="small")
    axes[0].set_title(f"{doc['campaign']['label']}: every cell by run order (red ring = outlier, "
                      f"dotted = not valid)", fontsize="medium")
    step = max(1, -(-len(cells) // MAX_TICK_LABELS))  # one label per cell past a few dozen is unreadable (10,000: minutes)
    axes[1].set_xticks(range(0, len(cells), step))
    axes[1].set_xticklabels([f"R{c.round}\n{c.position or ''}" if c.round is not None else str(c.index)
                             for c in cells[::step]], fontsize="small")
    axes[1].set_xlabel("run order")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def render_report(report_doc: Mapping[str, Any], out_dir: str | Path) -> dict[str, str]:
    """Write the Markdown evidence and the plot into ``out_dir``; returns {"markdown": path, "plot": path}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot = render_plot(report_doc, out / PLOT_NAME)
    markdown = out / MARKDOWN_NAME
    markdown.write_text(render_markdown(report_doc, PLOT_NAME), encoding="utf-8")
    return {"markdown": str(markdown), "plot": str(plot)}
