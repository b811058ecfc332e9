"""Compare perf dumps: N files against the first (like upstream compare_perf.py), or a baseline group against a
candidate group with the campaign statistics (stats.py). Produces the ``compare.v1`` payload and its Markdown."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import advice
from ..judging import perf_dump
from . import distribution, sample_size, stats
from ..judging.cell import Cell

# Single-sample markers, as upstream compare_perf.py: e2e +-2 %; a stage moves when it changes by more than both
# 10 % and 120 ms. They are indicative only: one dump per side carries no noise estimate.
E2E_MARK_PCT = 2.0
STAGE_MARK_FRACTION = 0.10
STAGE_MARK_MS = 120.0


# A dump does not say whether it was a warm engine's first request: every dump given counts (a campaign report's
# change is over its steady state, without those requests: a different quantity, named so in every table).
MEASURED_OVER = "every_dump_given"

# Round structure in file names: the runner's "<stem>_r01p02" (round 1, position 2) and "r1-a1-eager" styles.
ROUND_NAME = re.compile(r"(?:^|[_\-.])r(\d+)(?:p(\d+)|[_\-.]([ab]\d))", re.IGNORECASE)


def round_of(path: str | Path) -> tuple[int | None, str | None]:
    """(round, position) named in a dump's file name, or (None, None)."""
    match = ROUND_NAME.search(Path(path).name)
    if not match:
        return None, None
    return int(match.group(1)), (match.group(3).upper() if match.group(3) else f"p{int(match.group(2))}")


def load_group(paths: Sequence[str | Path], arm: str, memory_kind: str | None, start_index: int = 0) -> list[Cell]:
    """Dumps as valid campaign cells (the dump's path as the cell's perf_dump_path), so the campaign statistics
    apply unchanged; rounds come from the file names (see ROUND_NAME) when every dump names one, else none."""
    cells = []
    for offset, path in enumerate(paths):
        perf = perf_dump.load_perf_dump(path, memory_kind)
        rnd, position = round_of(path)
        cells.append(Cell(index=start_index + offset, arm=arm, round=rnd, position=position, status="valid",
                          perf_dump_path=str(path), perf=perf.to_json()))
    return cells


def _rounds_all_or_none(cells: list[Cell]) -> list[Cell]:
    """Rounds count only when every dump names one (a partial naming would silently drop dumps from rounds)."""
    if all(c.round is not None for c in cells):
        return cells
    return [dataclasses.replace(c, round=None, position=None) for c in cells]


def _kind_of_stage(name: str) -> str:
    """Denoise stages are marked like the Denoise total they sum to, so one change gets one mark in every table."""
    return "e2e" if perf_dump.is_denoise_stage(name) else "stage"


def _row(baseline: float | None, candidate: float | None, kind: str) -> dict[str, Any]:
    diff = None if baseline is None or candidate is None else candidate - baseline
    pct = distribution.relative_change_pct(baseline, candidate)
    status = None
    if diff is not None and kind == "e2e":
        status = "faster" if pct < -E2E_MARK_PCT else "slower" if pct > E2E_MARK_PCT else "same"
    elif diff is not None and kind == "stage":
        if candidate > max(baseline * (1 + STAGE_MARK_FRACTION), baseline + STAGE_MARK_MS):
            status = "slower"
        elif candidate < min(baseline * (1 - STAGE_MARK_FRACTION), baseline - STAGE_MARK_MS):
            status = "faster"
        elif abs(diff) <= STAGE_MARK_MS and (pct is None or abs(pct) <= STAGE_MARK_FRACTION * 100):
            status = "same"
        else:
            status = "minor"  # past one bound only: a large share of a short stage, or a small share of a long one
    return {"baseline": baseline, "candidate": candidate, "diff": diff, "change_pct": pct, "status": status}


def _mark_from_interval(metric: Mapping[str, Any], threshold_pct: float) -> str:
    """With groups the E2E and Denoise marks are the statistics': "same" only when the interval of the change lies
    inside the +/-threshold band it states, "faster"/"slower" only when it lies beyond it, else "unclear"."""
    low, high = metric["ci_low_pct"], metric["ci_high_pct"]
    if low is None or high is None:
        return "unclear"
    if high < -threshold_pct:
        return "faster"
    if low > threshold_pct:
        return "slower"
    return "same" if -threshold_pct < low and high < threshold_pct else "unclear"


def _stage_row(name: str, base: Mapping[str, Any], cand: Mapping[str, Any], denoise_mark: str | None
               ) -> dict[str, Any]:
    """A stage's row; a denoise stage takes the Denoise total's mark where statistics give it (one change, one
    mark in every table)."""
    row = {"name": name, **_row(base["stages"].get(name, {}).get("mean"), cand["stages"].get(name, {}).get("mean"),
                                _kind_of_stage(name))}
    if denoise_mark is not None and perf_dump.is_denoise_stage(name):
        row["status"] = denoise_mark
    return row


def compare_cells(cells: Sequence[Cell], baseline: str, candidate: str, *,
                  discard_outliers: bool = False, **options: Any) -> dict[str, Any]:
    """One comparison entry: mean-of-group rows for every figure, plus statistics when both groups have > 1."""
    summary = stats.summarize(cells, [baseline, candidate], baseline, candidate,
                              discard_outliers=discard_outliers, command=advice.COMPARE, **options)
    b, c = summary["arms"][baseline], summary["arms"][candidate]
    mean = lambda arm, key: arm[key]["mean"]  # noqa: E731
    stage_names = list(dict.fromkeys([*b["stages"], *c["stages"]]))
    statistics = summary["comparison"] if b["n_used"] > 1 and c["n_used"] > 1 else None
    rows = {key: _row(mean(b, key), mean(c, key), "e2e") for key in ("e2e_ms", "denoise_ms")}
    if statistics is not None:
        for key, row in rows.items():
            row["status"] = _mark_from_interval(statistics["metrics"][key], statistics["threshold_pct"])
    return {
        "baseline": baseline, "candidate": candidate, "n_baseline": b["n_used"], "n_candidate": c["n_used"],
        **rows,
        "stages": [_stage_row(n, b, c, rows["denoise_ms"]["status"] if statistics else None) for n in stage_names],
        "step0_ms": _row(mean(b, "step0_ms"), mean(c, "step0_ms"), "stage"),
        "steady_step_mean_ms": _row(mean(b, "steady_step_mean_ms"), mean(c, "steady_step_mean_ms"), "stage"),
        "peak_memory_mb": _row(b["peak_memory_mb"]["max"], c["peak_memory_mb"]["max"], "memory"),
        "statistics": statistics, "measured_over": MEASURED_OVER,
        "arms": summary["arms"],
    }


def compare_files(paths: Sequence[str | Path], memory_kind: str | None, **options: Any) -> dict[str, Any]:
    """compare_perf.py's mode: the first file is the baseline, every other file is compared with it."""
    cells = [dataclasses.replace(cell, arm="baseline" if i == 0 else f"file{i}", round=None, position=None)
             for i, cell in enumerate(load_group(paths, "", memory_kind))]  # one dump a side
    comparisons = [compare_cells([cells[0], cell], "baseline", cell.arm, **options) for cell in cells[1:]]
    return _payload("files", cells, comparisons, memory_kind, options)


def compare_groups(baseline: Sequence[str | Path], candidate: Sequence[str | Path], memory_kind: str | None,
                   **options: Any) -> dict[str, Any]:
    cells = _rounds_all_or_none(load_group(baseline, "baseline", memory_kind) +
                                load_group(candidate, "candidate", memory_kind, start_index=len(baseline)))
    return _payload("groups", cells, [compare_cells(cells, "baseline", "candidate", **options)], memory_kind,
                    options)


def input_rows(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """compare.v1 ``inputs``: each dump with the group it was compared in."""
    return [{"index": c.index, "group": c.arm, "path": c.perf_dump_path, "perf": c.perf} for c in cells]


def _payload(mode: str, cells: Sequence[Cell], comparisons: list[dict[str, Any]], memory_kind: str | None,
             options: Mapping[str, Any]) -> dict[str, Any]:
    return {"mode": mode, "memory_kind": memory_kind,
            "threshold_pct": options.get("threshold_pct", stats.DEFAULT_THRESHOLD_PCT),
            "inputs": input_rows(cells), "comparisons": comparisons}


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}%"


MARKS = {"faster": "faster", "slower": "slower", "same": "same", "minor": "minor", "unclear": "unclear",
         None: ""}  # one vocabulary, every table
MARK_LEGEND = ("Marks (every table, one rule per kind): E2E, Denoise and the denoise stages move when they change by "
               f"more than {E2E_MARK_PCT:g} %; other stages and steps when by more than both "
               f"{STAGE_MARK_FRACTION * 100:g} % and {STAGE_MARK_MS:g} ms, are the same only within both, and are "
               "minor in between. With several dumps per side, E2E and Denoise are marked by the statistics instead: "
               "the same only when the interval of the change lies inside the +/-threshold band, faster or slower "
               "only beyond it, else unclear. Other marks are single-sample indications, not significance.")


def render_markdown(payload: Mapping[str, Any]) -> str:
    """Markdown for a compare.v1 payload: summary, stages, steps, memory, and statistics where there are any."""
    lines = ["# Perf dump comparison", ""]
    files = payload["inputs"]
    memory_label = {"process_rss": "process RSS (CPU adapter, not device memory)",
                    "device": "reserved device memory"}.get(payload["memory_kind"])
    for cmp in payload["comparisons"]:
        base_paths = [f["path"] for f in files if f["group"] == cmp["baseline"]]
        cand_paths = [f["path"] for f in files if f["group"] == cmp["candidate"]]
        lines += [f"## {cmp['candidate']} vs {cmp['baseline']}", "",
                  f"Baseline ({cmp['n_baseline']}): " + ", ".join(f"`{p}`" for p in base_paths),
                  f"Candidate ({cmp['n_candidate']}): " + ", ".join(f"`{p}`" for p in cand_paths), ""]
        kind = "mean " if max(cmp["n_baseline"], cmp["n_candidate"]) > 1 else ""
        lines += ["### 1. High-level summary", "",
                  f"| Metric | Baseline {kind}| Candidate {kind}| Diff | Change | Mark |",
                  "|---|---:|---:|---:|---:|---|"]
        for label, key, scale, unit in (("E2E", "e2e_ms", 1000, "s"), ("Denoise", "denoise_ms", 1000, "s"),
                                        ("Step 0", "step0_ms", 1, "ms"),
                                        ("Steady step (mean of steps >= 1)", "steady_step_mean_ms", 1, "ms")):
            row = cmp[key]
            digits = 6 if unit == "s" else 3
            scaled = [None if row[k] is None else row[k] / scale for k in ("baseline", "candidate", "diff")]
            lines.append(f"| {label} ({unit}) | {_fmt(scaled[0], digits)} | {_fmt(scaled[1], digits)} | "
                         f"{_fmt(scaled[2], digits)} | {_pct(row['change_pct'])} | {MARKS[row['status']]} |")
        mem = cmp["peak_memory_mb"]
        if memory_label is None:
            lines.append("| Peak memory | withheld: a dump does not say whether its figures are device memory or "
                         "process RSS; pass --memory-kind | | | | |")
        else:
            lines.append(f"| Peak memory, {memory_label} (MiB, max) | {_fmt(mem['baseline'], 2)} | "
                         f"{_fmt(mem['candidate'], 2)} | {_fmt(mem['diff'], 2)} | {_pct(mem['change_pct'])} | |")
        lines += ["", "### 2. Stage breakdown (ms)", "", "| Stage | Baseline | Candidate | Diff | Change | Mark |",
                  "|---|---:|---:|---:|---:|---|"]
        for row in cmp["stages"]:
            lines.append(f"| {row['name']} | {_fmt(row['baseline'])} | {_fmt(row['candidate'])} | "
                         f"{_fmt(row['diff'])} | {_pct(row['change_pct'])} | {MARKS[row['status']]} |")
        lines.append("")
        st = cmp["statistics"]
        if st is None:
            lines += [MARK_LEGEND + " Give several dumps per side (`--baseline ... --candidate ...`) for "
                      "statistics.", ""]
            continue
        lines += ["### 3. Statistics", "", "The change over every dump given: a dump does not say whether it was a "
                  "warm engine's first request, so none is set apart (a campaign report's change is over its steady "
                  "state, a different quantity).", ""] + render_statistics(st, cmp["arms"]) + [""]
        lines += _outliers_by_file(cmp["arms"], files) + [MARK_LEGEND, ""]
    return "\n".join(lines).rstrip() + "\n"


def _outliers_by_file(arms: Mapping[str, Any], files: Sequence[Mapping[str, Any]]) -> list[str]:
    """Outliers named by the dump they came from, not by an index."""
    path_of = {f["index"]: f["path"] for f in files}
    lines = []
    for arm in arms.values():
        for o in arm["outliers"]:
            where = f" (round {o['round']})" if o.get("round") is not None else ""
            stage = f", mostly {o['attributed_stage']}" if o.get("attributed_stage") else ""
            lines.append(f"- Outlier `{path_of.get(o['cell'], o['cell'])}`{where}: E2E {o['value_ms']:.3f} ms vs the "
                         f"{arm['arm']} median {o['arm_median_ms']:.3f} ms{stage}"
                         + ("; discarded." if o["discarded"] else "; kept in the statistics."))
    return lines + ([""] if lines else [])


def change_text(change_pct: float | None, low: float | None, high: float | None, confidence: float | None,
                interval_reason: str | None, digits: int = 3) -> str:
    """One change with its one interval, as every surface prints it: "+4.200% (95% interval [+1.000%, +7.000%])",
    or the change and why it has no interval."""
    if change_pct is None:
        return "n/a"
    if low is None or high is None or confidence is None:
        return f"{change_pct:+.{digits}f}% ({interval_reason or 'no interval'})"
    return f"{change_pct:+.{digits}f}% ({confidence * 100:.4g}% interval [{low:+.{digits}f}%, {high:+.{digits}f}%])"


def change_with_interval(comparison: Mapping[str, Any], metric: str) -> str:
    """change_text of ``metric`` in a comparison, at the comparison's confidence."""
    m = comparison["metrics"][metric]
    return change_text(m["change_pct"], m["ci_low_pct"], m["ci_high_pct"], comparison["bootstrap"]["confidence"],
                       m.get("interval_reason"))


def render_statistics(comparison: Mapping[str, Any], arms: Mapping[str, Any]) -> list[str]:
    """The verdict block shared by compare and the bench report."""
    conf = f"{comparison['bootstrap']['confidence'] * 100:.4g}%"
    lines = [f"| Metric | Baseline mean (s) | Candidate mean (s) | Change | {conf} interval | Verdict |",
             "|---|---:|---:|---:|---|---|"]
    for key, label in (("e2e_ms", "E2E"), ("denoise_ms", "Denoise")):
        m = comparison["metrics"][key]
        ci = "n/a" if m["ci_low_pct"] is None else f"[{m['ci_low_pct']:+.3f}%, {m['ci_high_pct']:+.3f}%]"
        lines.append(f"| {label} | {_fmt(_s(m['baseline_mean']), 6)} | {_fmt(_s(m['candidate_mean']), 6)} | "
                     f"{_pct(m['change_pct'])} | {ci} | {m['verdict']} |")
    primary = comparison["metrics"][comparison["primary_metric"]]
    lines += ["", f"**Verdict ({comparison['primary_metric']}, threshold {comparison['threshold_pct']:g}%): "
                  f"{comparison['verdict']}** — {primary['reason']}.",
              f"Rule: {comparison['rule']} Interval: {comparison['bootstrap']['method']}, "
              f"{comparison['bootstrap']['resamples']} resamples, seed {comparison['bootstrap']['seed']}."]
    lines += render_noise_floor(primary)
    if comparison.get("next_step"):
        lines.append(f"**Next step:** {comparison['next_step']}.")
    for name in (comparison["baseline_arm"], comparison["candidate_arm"]):
        dist = arms[name]["e2e_ms"]
        if dist["n"]:
            cv = "n/a" if dist["cv_pct"] is None else f"{dist['cv_pct']:.3f}%"
            lines.append(f"- {name}: n={dist['n']}, E2E median {_fmt(_s(dist['median']), 6)} s, CV {cv}, "
                         f"range {_fmt(_s(dist['min']), 6)}–{_fmt(_s(dist['max']), 6)} s")
    return lines


def render_noise_floor(metric: Mapping[str, Any]) -> list[str]:
    """One line: what this many samples can resolve (also when the verdict is insufficient_data)."""
    floor = metric.get("noise_floor")
    if not floor or floor["min_detectable_effect_pct"] is None:
        return [f"Noise floor ({metric['metric']}): not measurable yet (needs 2 valid cells per arm)."]
    conf, power = floor["confidence"] * 100, floor["power"] * 100
    return [f"Noise floor ({metric['metric']}): CV {floor['baseline_cv_pct']:.3f}% / {floor['candidate_cv_pct']:.3f}% "
            f"(n={floor['n_baseline']}/{floor['n_candidate']}); smallest effect detectable "
            f"at {conf:g}% confidence and {power:g}% power: {floor['min_detectable_effect_pct']:.3f}%; a "
            f"{floor['target_pct']:g}% verdict needs " + _samples_phrase(floor)]


def _samples_phrase(floor: Mapping[str, Any]) -> str:
    """How many samples a verdict needs, or that the count is out of reach (sample_size.MAX_SAMPLES_STATED)."""
    if floor["samples_per_arm_needed"] > sample_size.MAX_SAMPLES_STATED:
        return f"more than {sample_size.MAX_SAMPLES_STATED:,} samples per arm (out of reach)."
    return (f"{floor['samples_per_arm_needed']} samples per arm ({floor['more_samples_per_arm']} more, "
            f"{floor['rounds_needed']} A/B/B/A rounds).")


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000
