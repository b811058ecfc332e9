"""EVIDENCE.md in the seed PR's order (claim and verdict, environment, the A/B/B/A table, memory, output identity,
the profile table, replay correctness, the cleanup ledger, how to reproduce) and the plot, from the folder's own
documents only: rendering the same folder twice gives the same text, which is how verify checks the Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from .. import advice, contract
from ..engine import engine_overlap
from ..results import perf_compare, report, steady_state
from ..judging.cell import Cell
from . import manifest, plot

MARKDOWN_NAME = "EVIDENCE.md"
PLOT_NAME = "evidence-plot.png"
LAYOUT_KEYS = ("num_gpus", "tp_size", "sp_degree", "ulysses_degree", "ring_degree")  # documents sort their keys


def _read_json(root: Path, rel: str | None) -> dict[str, Any] | None:
    if not rel or not (root / rel).is_file():
        return None
    try:
        return json.loads((root / rel).read_text(encoding="utf-8"))
    except ValueError:
        return None


def local_path(root: Path, doc: Mapping[str, Any], recorded: str | None,
               camp: Mapping[str, Any] | None = None) -> Path | None:
    """A path a document recorded at run time, inside the folder as it is now (folders move: fixtures, reviews, a
    resumed run in a renamed folder). The campaign report says where it was written (``plan.output_dir``, the
    folder's campaign/ then), which holds even when the manifest's ``out_dir`` has since moved on."""
    if not recorded:
        return None
    prefixes = [(str(doc["out_dir"]).rstrip("/"), root)]
    if camp is not None and (camp.get("plan") or {}).get("output_dir"):
        prefixes.insert(0, (str(camp["plan"]["output_dir"]).rstrip("/"), root / "campaign"))
    for prefix, here in prefixes:
        if recorded.startswith(prefix + "/"):
            return here / recorded[len(prefix) + 1:]
    return Path(recorded)


def campaign_report(root: Path, doc: Mapping[str, Any]) -> dict[str, Any] | None:
    return _read_json(root, manifest.step(doc, "campaign")["document"])


def _step_line(step: Mapping[str, Any]) -> str:
    wall = "" if step["wall_s"] is None else f"{step['wall_s']:.1f} s"
    return f"| {step['name']} | {step['status']} | {wall} | {step['reason'] or ''} |"


def _claim(doc: Mapping[str, Any], camp: Mapping[str, Any] | None) -> list[str]:
    req = doc["request"]
    change = ("eager against breakable CUDA graphs (`--enable-breakable-cuda-graph`)" if req["experiment"] == "bcg"
              else f"`{' '.join(req['baseline_args']) or '(preset defaults)'}` against "
                   f"`{' '.join(req['candidate_args'])}`")
    shared = f" (both arms with `{' '.join(req['common_args'])}`)" if req.get("common_args") else ""
    lines = ["## Claim and verdict", "", f"- Change: {change}{shared} on preset `{req['model']}`; a change counts "
             f"from {req['threshold_pct']:g}%.", f"- Folder state: {doc['state']}."]
    comparison = (camp or {}).get("summary", {}).get("comparison") if camp else None
    if not comparison:
        return [*lines, "- Verdict: none (the campaign has not finished).", ""]
    metric = comparison["primary_metric"]
    figures = comparison["metrics"][metric]
    lines.append(f"- **Verdict: {comparison['verdict']}** on {metric}: {comparison.get('reason') or ''}")
    apart = (comparison.get("steady_state") or {}).get("excluded_cells")
    over = (f"means over the steady state: the valid cells less each warm engine's first measured request, cells "
            f"{', '.join(map(str, apart))}, shown below" if apart else "means over the valid cells")
    if figures.get("change_pct") is not None:
        lines.append(f"- {metric} change {perf_compare.change_with_interval(comparison, metric)} "
                     f"({comparison['baseline_arm']} -> {comparison['candidate_arm']}, {over}).")
    stopping = camp["campaign"]["stopping"]
    lines.append(f"- Rule: {stopping.get('description', stopping['rule'])}; rounds run {stopping['rounds_run']}.")
    lines += filter(None, [engine_overlap.summary_line(camp.get("engines") or {})])
    step = advice.render(comparison.get("advice"), advice.EVIDENCE, samples=req["samples"])
    if step:
        lines.append(f"- Next step: {step}")
    return [*lines, *_first_requests(camp), ""]


def _first_requests(camp: Mapping[str, Any]) -> list[str]:
    """Each warm engine's first measured request beside the steady state the verdict is on (steady_state.py)."""
    arms = report.arm_order(camp["campaign"], [Cell.from_json(c) for c in camp["cells"]])
    lines = steady_state.markdown(camp["summary"], arms)
    return ["", *lines[:-1]] if lines else []


def _environment(doc: Mapping[str, Any]) -> list[str]:
    versions = ", ".join(f"{k} {v}" for k, v in sorted(doc["versions"].items()))
    machine = doc["machine"]
    gpus = ", ".join(g["name"] for g in machine.get("gpus", [])) or \
        "none (CPU; the engine runs through the CPU adapter)"
    layout = ", ".join(f"{k} {doc['layout'][k]}" for k in LAYOUT_KEYS if doc["layout"].get(k) is not None)
    return ["## Environment", "", f"- Versions: {versions}.", f"- Machine: {machine.get('platform')}, "
            f"{machine.get('cpu_count')} CPU(s), Python {machine.get('python')}; GPUs: {gpus}.",
            f"- Parallel layout (both arms): {layout}.",
            f"- Request hash {doc['request_sha256'][:16]}…; samples per slot {doc['request']['samples']}, budget "
            f"{doc['request']['budget_requests']} measured requests.", ""]


def _memory(root: Path, doc: Mapping[str, Any], camp: Mapping[str, Any]) -> list[str]:
    """Peak allocated and peak reserved device memory per arm, read from the stored perf dumps."""
    lines = ["### Memory", ""]
    per_arm: dict[str, dict[str, float]] = {}
    kinds = {c["perf"].get("memory_kind") for c in camp["cells"] if c["status"] == "valid" and c["perf"]}
    if kinds != {"device"}:
        what = "process RSS of the CPU adapter, not device memory" if kinds == {"process_rss"} else \
            "not recorded: the engine's logs do not say what its memory figures are"
        return [*lines, f"Peak memory: {what}; no device-memory figure is stated.", ""]
    for cell in camp["cells"]:
        path = local_path(root, doc, cell.get("perf_dump_path"), camp)
        dump = json.loads(path.read_text(encoding="utf-8")) if path and path.is_file() else {}
        for point in (dump.get("memory_checkpoints") or {}).values():
            arm = per_arm.setdefault(cell["arm"], {})
            for key in ("peak_allocated_mb", "peak_reserved_mb"):
                if isinstance(point, dict) and isinstance(point.get(key), (int, float)):
                    arm[key] = max(arm.get(key, 0.0), float(point[key]))
    lines += ["| Arm | Peak allocated (GiB) | Peak reserved (GiB) |", "|---|---:|---:|"]
    for arm, peaks in per_arm.items():
        lines.append(f"| {arm} | " + " | ".join(f"{peaks[k] / 1024:.3f}" if k in peaks else "n/a"
                                                for k in ("peak_allocated_mb", "peak_reserved_mb")) + " |")
    return [*lines, "", "Rank-0 perf dumps, max over each arm's memory checkpoints; allocated does not grow with "
            "CUDA-graph pools, reserved does.", ""]


def _skipped_or(step: Mapping[str, Any], body: list[str]) -> list[str]:
    if step["status"] == "done":
        return body
    return [f"Step {step['name']}: {step['status']}" + (f" — {step['reason']}" if step["reason"] else "") + "."]


def _profile(root: Path, doc: Mapping[str, Any]) -> list[str]:
    step = manifest.step(doc, "trace_analysis")
    compared = _read_json(root, step["document"]) or {}
    classified = _read_json(root, (step["result"] or {}).get("classify")) or {}
    body = ["Profiled with the engine's torch.profiler, one request per arm; profiled timings are diagnostic, "
            "never benchmark numbers.", "", compared.get("markdown", "").rstrip()]
    families = sorted((classified.get("families") or {}).values(), key=lambda f: -f["share"])
    if families:
        body += ["", "Fast-path families of the candidate's hot kernels (analyze_trace.py classify): "
                 + ", ".join(f"{f['family_name']} {f['share'] * 100:.1f}%" for f in families[:8]) + "."]
    elif step["status"] == "done":
        body += ["", "No hot kernel of the candidate belongs to a known fast-path family (analyze_trace.py classify)."]
    return ["## Profile comparison", "", *_skipped_or(step, body), ""]


def _replay(root: Path, doc: Mapping[str, Any]) -> list[str]:
    step = manifest.step(doc, "bcg_replay")
    replay = _read_json(root, step["document"]) or {}
    body = [f"BCG replay {'OK' if replay.get('ok') else 'NOT OK'}: {len(replay.get('pairs', []))} eager/BCG pairs; "
            + ("; ".join(replay.get("problems", [])) or "no problem") + "."]
    return ["## Replay correctness", "", *_skipped_or(step, body), ""]


def _cleanup(root: Path, doc: Mapping[str, Any]) -> list[str]:
    step = manifest.step(doc, "cleanup")
    verified = _read_json(root, step["document"]) or {}
    body = [f"{verified.get('entry_count')} ledger entr(ies) re-checked after the run: "
            f"{verified.get('residue_count')} cache dir(s) left, {verified.get('recorded_failures')} recorded "
            "failure(s)."]
    return ["## Cache cleanup", "", *_skipped_or(step, body), ""]


def render_markdown(root: Path, doc: Mapping[str, Any]) -> str:
    camp = campaign_report(root, doc)
    req = doc["request"]
    lines = [f"# Evidence: {req['model']}, {'eager vs BCG' if req['experiment'] == 'bcg' else 'baseline vs candidate'}",
             "", *_claim(doc, camp), *_environment(doc), "## A/B/B/A run order", ""]
    if camp:
        lines += [*report.run_order_section(camp), *_memory(root, doc, camp), "## Output identity", "",
                  *report.output_quality_section(camp), ""]
    else:
        lines += ["The campaign has not finished.", ""]
    lines += [f"![every cell by run order; contended and invalid cells marked]({PLOT_NAME})", ""]
    lines += [*_profile(root, doc), *_replay(root, doc), *_cleanup(root, doc)]
    lines += ["## Steps", "", "| Step | Status | Wall | Reason |", "|---|---|---:|---|",
              *(_step_line(s) for s in doc["steps"]), "", "## How to reproduce", "",
              "The whole folder (resumes where it stopped; `verify` re-checks it):", "", "```bash",
              doc_command(doc), "```", ""]
    for step in doc["steps"]:
        if step["command"]:
            lines += [f"{step['name']}:", "", "```bash", step["command"], "```", ""]
    return contract.redact("\n".join(lines).rstrip() + "\n")


def doc_command(doc: Mapping[str, Any]) -> str:
    import shlex

    req = doc["request"]
    argv = ["python3", "scripts/collect_pr_evidence.py", "run", "--out", "DIR", "--model", req["model"]]
    if req["model_path"]:
        argv += ["--model-path", req["model_path"]]
    argv += [a for k, v in sorted(req["overrides"].items()) for a in ("--override", f"{k}={v}")]
    if req["experiment"] == "bcg":
        argv.append("--bcg")
    argv += [f"--{side}-args={shlex.join(req[f'{side}_args'])}" for side in ("baseline", "candidate")
             if req[f"{side}_args"]]
    if req.get("common_args"):  # absent when unused
        argv.append(f"--extra-args={shlex.join(req['common_args'])}")
    argv += ["--threshold", f"{req['threshold_pct']:g}", "--samples", str(req["samples"]), "--budget-requests",
             str(req["budget_requests"])]
    if req["budget_minutes"]:
        argv += ["--budget-minutes", f"{req['budget_minutes']:g}"]
    if req["model_cache_root"]:
        argv += ["--model-cache-root", req["model_cache_root"]]
    if req.get("engine_overlap"):  # absent at its default, auto
        argv += ["--engine-overlap", req["engine_overlap"]]
    return shlex.join(argv)


def write(root: Path, doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Write EVIDENCE.md and the plot; their file records (the manifest keeps them under ``rendered``)."""
    markdown = root / MARKDOWN_NAME
    markdown.write_text(render_markdown(root, doc), encoding="utf-8")
    written = [markdown]
    camp = campaign_report(root, doc)
    if camp is not None and camp["cells"]:
        written.append(plot.render(camp, root / PLOT_NAME))
    return [manifest.file_record(root, p) for p in written]
