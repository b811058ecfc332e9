#!/usr/bin/env python3
"""Re-derive the statistics of kept bench (and serving) reports from what they measured, after the statistics code
changed.

A kept report (tests/fixtures) holds what was measured (the cells: each request's perf figures, judged from its own
logs) and what was derived from it (summary.arms, summary.comparison, the sequential rule's looks). When the way a
figure is derived changes, the measured part stays and the derived part is recomputed here, exactly as the runner
computes it (evidence.verify.recomputed_summary, the path `verify` checks a folder with): the statistics of the
cells, overruled by differing outputs, then by the last look of --until-verdict. The report's Markdown beside it is
re-rendered; inside an evidence folder every recorded hash is brought up to date and EVIDENCE.md and the plot are
re-rendered (collect_pr_evidence.py render), so `verify` holds the folder to today's code. Nothing measured is
touched: the cells are compared before and after.

  .venv/bin/python tests/gpu_harness/rederive_reports.py tests/fixtures/**/<report>.json ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from sgl_diffusion_bench import contract  # noqa: E402
from sgl_diffusion_bench.results import report  # noqa: E402
from sgl_diffusion_bench.judging.cell import Cell  # noqa: E402
from sgl_diffusion_bench.evidence import verify  # noqa: E402


def rederive(doc: dict[str, Any]) -> dict[str, Any]:
    summary = doc["summary"]
    if "requests" in summary:
        raise SystemExit("a manifest campaign: re-derive its per-request verdicts too before using this tool on it")
    fresh, looks = verify.recomputed_summary(doc, [Cell.from_json(c) for c in doc["cells"]])
    rule = verify.stopping_rule(doc["campaign"])
    if rule is not None:  # the looks and the rule's words are derived too
        doc["campaign"]["stopping"].update(looks=looks, description=rule.describe())
    summary["arms"], summary["comparison"] = fresh["arms"], fresh["comparison"]
    return doc


def rederive_serving(doc: dict[str, Any]) -> dict[str, Any]:
    """A serving-report.v1: each load point's comparison and per-shape changes from its stored blocks (their
    per-request results), as serving/run.py derives them."""
    import dataclasses

    from sgl_diffusion_bench.serving import load, verdict

    fields = {f.name for f in dataclasses.fields(load.RequestResult)}
    settings = doc["settings"]
    options = dict(threshold_pct=settings["threshold_pct"], resamples=settings["resamples"], seed=settings["seed"],
                   confidence=settings["confidence"], min_rounds=settings["min_rounds"])
    for point in doc["load_points"]:
        blocks = [{**b, "duration": b["metrics"]["duration"],
                   "requests": [load.RequestResult(**{k: v for k, v in r.items() if k in fields})
                                for r in b["requests"]]} for b in point["blocks"]]
        point["comparison"] = verdict.compare(blocks, **options)
        point["shapes"] = verdict.shape_changes(blocks, **options)
    return doc


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rehash_folder(folder: Path) -> None:
    manifest = folder / "evidence.json"
    doc = json.loads(manifest.read_text(encoding="utf-8"))
    for rec in [f for s in doc["steps"] for f in s["files"]] + doc["rendered"]:
        path = folder / rec["path"]
        if path.is_file():
            rec["sha256"], rec["bytes"] = _sha(path), path.stat().st_size
    manifest.write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    if doc["rendered"]:  # a folder kept before it was rendered stays unrendered
        subprocess.run([sys.executable, str(REPO / "scripts" / "collect_pr_evidence.py"), "render",
                        str(folder), "--json"], check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    args = parser.parse_args()
    for path in args.reports:
        before = json.loads(path.read_text(encoding="utf-8"))
        if before.get("schema") == "serving-report.v1":
            doc = rederive_serving(json.loads(path.read_text(encoding="utf-8")))
            assert doc["load_points"][0]["blocks"] == before["load_points"][0]["blocks"]
            assert not contract.validation_errors(doc, "serving-report.v1")
            path.write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"{path}: serving, {len(doc['load_points'])} load points", file=sys.stderr)
            continue
        markdown = path.with_suffix(".md")  # the report's own Markdown, where it is kept
        doc = rederive(json.loads(path.read_text(encoding="utf-8")))
        assert doc["cells"] == before["cells"], f"{path}: the measured cells changed"
        errors = contract.validation_errors(doc, "bench-report.v1")
        assert not errors, f"{path}: {errors[:3]}"
        path.write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        if markdown.is_file():
            markdown.write_text(report.render_markdown(doc), encoding="utf-8")
        folder = next((p for p in path.parents if (p / "evidence.json").is_file()), None)
        if folder is not None:
            rehash_folder(folder)
        print(f"{path}: {doc['summary']['comparison'] and doc['summary']['comparison']['verdict']}"
              f"{' + ' + markdown.name if markdown.is_file() else ''}{' + folder ' + folder.name if folder else ''}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
