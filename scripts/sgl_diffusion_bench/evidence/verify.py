"""``collect_pr_evidence.py verify DIR``: a reviewer's check of a folder, from the folder alone. Every recorded
file is re-hashed and no unrecorded file may sit beside them; every document is validated against its schema; the
log gates (run_judge, the runner's own request path) are re-run over each counted cell's stored logs and perf dump;
the statistics and the verdict are recomputed from the stored per-cell numbers; EVIDENCE.md is re-rendered and
compared line by line. One finding per discrepancy: the file, what was expected, what was found."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from .. import contract, fileio, presets
from ..campaign import sequential
from ..judging import output_check, run_judge, validity
from ..results import stats
from ..judging.cell import Cell
from . import manifest, render

COMPARED_FIGURES = ("baseline_mean", "candidate_mean", "change_pct", "ci_low_pct", "ci_high_pct", "interval_reason",
                    "verdict")
FIGURE_BLOCKS = ("stages", "steps", "memory")
LOOK_FIGURES = ("verdict", "change_pct", "ci_low_pct", "ci_high_pct", "cv_pct", "round_change_sd_pct")
STATE_FILES = {manifest.NAME}
LEDGER_NAME, LEDGER_SCHEMA = "cleanup.jsonl", "cleanup-ledger.v1"


def _finding(file: str, check: str, expected: Any, found: Any) -> dict[str, str]:
    return {"file": file, "check": check, "expected": str(expected), "found": str(found)}


class Verifier:
    def __init__(self, root: Path):
        self.root = root
        self.findings: list[dict[str, str]] = []
        self.checked = {"files": 0, "documents": 0, "cells_judged": 0, "statistics": False, "markdown": False}

    def add(self, *args: Any) -> None:
        self.findings.append(_finding(*args))

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)

    # -- files -----------------------------------------------------------------------------------------------------

    def files(self, doc: Mapping[str, Any]) -> None:
        records = [f for s in doc["steps"] for f in s["files"]] + list(doc["rendered"])
        for rec in records:
            path = self.root / rec["path"]
            self.checked["files"] += 1
            if not path.is_file():
                self.add(rec["path"], "missing", f"a file of {rec['bytes']} bytes, sha256 {rec['sha256']}", "no file")
                continue
            found = fileio.sha256_file_or_none(path)
            if found != rec["sha256"]:
                self.add(rec["path"], "hash", rec["sha256"], found or "a file that cannot be read")
        recorded = manifest.recorded_paths(doc) | STATE_FILES
        for path in sorted(p for p in self.root.rglob("*") if p.is_symlink() or not p.is_dir()):  # FIFOs too
            rel = self.rel(path)
            if rel not in recorded:
                self.add(rel, "not_recorded", "only files the manifest records", "a file it does not record")

    def documents(self, doc: Mapping[str, Any]) -> None:
        for rec in (f for s in doc["steps"] for f in s["files"]):
            path = self.root / rec["path"]
            if path.name == LEDGER_NAME and path.is_file():
                self._ledger(rec["path"], path)
            if not rec["path"].endswith(".json") or not path.is_file():
                continue
            try:
                body = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                self.add(rec["path"], "schema", "a JSON document", f"does not parse: {exc}")
                continue
            schema_id = body.get("schema") if isinstance(body, dict) else None
            if isinstance(schema_id, str) and schema_id in contract.list_schema_ids():
                self.checked["documents"] += 1
                errors = contract.validation_errors(body, schema_id)
                if errors:
                    self.add(rec["path"], "schema", f"a valid {schema_id}", errors[0])

    def _ledger(self, rel: str, path: Path) -> None:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            self.checked["documents"] += 1
            try:
                errors = contract.validation_errors(json.loads(line), LEDGER_SCHEMA)
            except ValueError as exc:
                errors = [f"does not parse: {exc}"]
            if errors:
                self.add(rel, "schema", f"line {number}: a valid {LEDGER_SCHEMA}", errors[0])

    # -- the campaign ------------------------------------------------------------------------------------------------

    def campaign(self, doc: Mapping[str, Any]) -> None:
        step = manifest.step(doc, "campaign")
        camp = render.campaign_report(self.root, doc)
        if step["status"] != "done" or camp is None:
            return
        preset = presets.get_preset(doc["request"]["model"])
        overrides = doc["request"]["overrides"]
        shape = output_check.RequestedShape(overrides.get("width", preset.width), overrides.get("height",
                                            preset.height), overrides.get("num_frames", preset.num_frames))
        cells = [Cell.from_json(c) for c in camp["cells"]]
        for cell in cells:
            if cell.valid:
                self._judge(doc, camp, cell, preset.task, shape)
        self._statistics(step["document"], camp, cells)

    def _judge(self, doc, camp, cell: Cell, task: str, shape: output_check.RequestedShape) -> None:
        log = render.local_path(self.root, doc, cell.log_path, camp)
        dump = render.local_path(self.root, doc, cell.perf_dump_path, camp)
        where = self.rel(log) if log else f"cell {cell.index}"
        if log is None or not log.is_file() or dump is None or not dump.is_file():
            return  # named by the file check already
        arm = camp["campaign"]["arms"][cell.arm]
        outputs = tuple(render.local_path(self.root, doc, o["path"], camp) for o in cell.outputs)
        try:
            judged = run_judge.judge(run_judge.JudgeRequest(
                log=log, engine_version=camp["engine"]["version"], perf_dump=dump,
                outputs=tuple(p for p in outputs if p is not None), bcg=bool(arm.get("bcg")),
                quality=arm.get("quality"), task=task, requested=shape))
        except contract.ToolError as exc:
            self.add(self.rel(dump), "perf_dump", "a perf dump the runner's parser reads", exc.message)
            return
        self.checked["cells_judged"] += 1
        if judged["status"] != "valid":
            self.add(where, "log_gate", f"cell {cell.index} counted (valid)",
                     f"{judged['status']}: {'; '.join(judged['reasons'][:2])}")
            return
        for key in ("e2e_ms", "denoise_ms"):  # a dump that disagrees is named here; the statistics below stay on
            if not _same(judged["perf"].get(key), (cell.perf or {}).get(key)):  # the report's cells, so an
                self.add(self.rel(dump), "perf_dump", f"cell {cell.index} {key} {(cell.perf or {}).get(key)}",
                         judged["perf"].get(key))  # untouched report is never named for a changed dump

    def _statistics(self, report_rel: str, camp: Mapping[str, Any], cells: list[Cell]) -> None:
        stored = camp["summary"]["comparison"]
        if stored is None:
            return
        summary, looks = recomputed_summary(camp, cells)
        for number, (again, recorded) in enumerate(zip(looks, camp["campaign"]["stopping"].get("looks") or [],
                                                       strict=True)):
            for key in LOOK_FIGURES:
                if not _same(again[key], recorded.get(key)):
                    self.add(report_rel, "statistics", f"campaign.stopping.looks[{number}].{key} "
                             f"{recorded.get(key)}", f"{again[key]} (from the stored cells)")
        self.checked["statistics"] = True
        for metric, figures in summary["comparison"]["metrics"].items():
            for key in COMPARED_FIGURES:
                if not _same(figures.get(key), stored["metrics"][metric].get(key)):
                    self.add(report_rel, "statistics", f"{metric} {key} {stored['metrics'][metric].get(key)}",
                             f"{figures.get(key)} (from the stored cells)")
        self._figures(report_rel, summary, camp["summary"])
        verdict = summary["comparison"]["verdict"]
        if verdict != stored["verdict"]:
            self.add(report_rel, "verdict", stored["verdict"], f"{verdict} (recomputed from the stored cells)")

    def _figures(self, report_rel: str, summary: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
        """Per-arm distributions (stages included) and the comparison's stage, step and memory figures."""
        pairs = [(f"summary.arms.{arm}", figures, stored["arms"].get(arm)) for arm, figures in summary["arms"].items()]
        pairs += [(f"summary.comparison.{block}", summary["comparison"][block], stored["comparison"].get(block))
                  for block in FIGURE_BLOCKS]
        for where, recomputed, recorded in pairs:
            for field, want, got in _differences(where, recorded, recomputed):
                self.add(report_rel, "statistics", f"{field} {want}", f"{got} (from the stored cells)")

    # -- the record against its documents ----------------------------------------------------------------------------

    def steps(self, doc: Mapping[str, Any]) -> None:
        """A complete folder holds every step a run of its request must finish, and each step's recorded result
        says what the step's own document says (the record is edited as easily as any file it hashes)."""
        if doc["state"] == "complete":
            for step in doc["steps"]:
                allowed = _allowed_statuses(doc, step["name"])
                if step["status"] not in allowed:
                    self.add(manifest.NAME, "step_status", f"steps.{step['name']}.status {step['status']}",
                             f"{' or '.join(allowed)} (what a complete run of this request leaves)")
        camp = render.campaign_report(self.root, doc)
        if camp is None:
            return
        recorded = {"campaign": (manifest.step(doc, "campaign")["result"] or {}).get("verdict"),
                    "output_identity": (manifest.step(doc, "output_identity")["result"] or {}).get("passed")}
        on_disk = {"campaign": (camp["summary"]["comparison"] or {}).get("verdict"),
                   "output_identity": (camp["summary"]["output_quality"] or {}).get("passed")}
        fields = {"campaign": "verdict", "output_identity": "passed"}
        for name, field in fields.items():
            if manifest.step(doc, name)["status"] in ("done", "failed") and recorded[name] != on_disk[name]:
                self.add(manifest.NAME, "step_result", f"steps.{name}.result.{field} {recorded[name]}",
                         f"{on_disk[name]} in {manifest.step(doc, 'campaign')['document']}")

    # -- the Markdown ----------------------------------------------------------------------------------------------

    def markdown(self, doc: Mapping[str, Any]) -> None:
        path = self.root / render.MARKDOWN_NAME
        if not path.is_file():
            return  # a missing EVIDENCE.md is named by the file check
        expected = render.render_markdown(self.root, doc).splitlines()
        found = path.read_text(encoding="utf-8").splitlines()
        self.checked["markdown"] = True
        for number, (want, got) in enumerate(zip(expected, found, strict=False), start=1):
            if want != got:
                self.add(render.MARKDOWN_NAME, "markdown", f"line {number}: {want}", got)
                return
        if len(expected) != len(found):
            self.add(render.MARKDOWN_NAME, "markdown", f"{len(expected)} lines", f"{len(found)} lines")


def stopping_rule(campaign: Mapping[str, Any]) -> sequential.StoppingRule | None:
    """The --until-verdict rule a report's campaign ran under; None for a fixed number of rounds."""
    stopping = campaign.get("stopping") or {}  # absent from reports older than the rule
    if stopping.get("rule") != "until_verdict":
        return None
    return sequential.StoppingRule(campaign["threshold_pct"], stopping["budget_rounds"], stopping["min_rounds"],
                                   stopping["overall_confidence"], metric=campaign["primary_metric"])


def recomputed_summary(camp: Mapping[str, Any], cells: list[Cell]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A report's summary as the runner makes it, from its stored cells: the statistics, overruled by differing
    outputs, then (--until-verdict) by the last of its looks, each recomputed over the cells up to the end of its
    round (why it stopped is kept: a spent time budget stops a look too). Returns the summary and the looks."""
    c = camp["campaign"]
    rule = stopping_rule(c)
    summary = stats.summarize(cells, list(c["arms"]), c["baseline_arm"], c["candidate_arm"],
                              discard_outliers=c["discard_outliers"], threshold_pct=c["threshold_pct"],
                              primary_metric=c["primary_metric"],
                              **({"confidence": rule.look_confidence} if rule is not None else {}))
    validity.apply_to_comparison(summary["comparison"], camp["summary"]["output_quality"])
    looks: list[dict[str, Any]] = []
    if rule is not None:
        ordered = sorted(cells, key=lambda cell: cell.index)
        for stored in c["stopping"]["looks"]:
            last = max((cell.index for cell in ordered if cell.round == stored["round"]), default=None)
            upto = [cell for cell in ordered if last is not None and cell.index <= last]
            again = sequential.look(rule, upto, c["baseline_arm"], c["candidate_arm"], stored["round"])
            looks.append({**again, "stop": stored.get("stop")})
        sequential.apply_to_comparison(summary["comparison"], rule, looks)
    return summary, looks


def _allowed_statuses(doc: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """What a finished run of the folder's request leaves in a step: done, or skipped where the step says it cannot
    apply (no BCG arm, or no GPU for the replay; no isolated cache to clean)."""
    req = doc["request"]
    if name == "bcg_replay":
        bcg = req["experiment"] == "bcg" or any("breakable-cuda-graph" in a for a in
                                                (*req["baseline_args"], *req["candidate_args"]))
        return ("done",) if bcg and doc["machine"].get("gpus") else ("skipped",)
    if name == "cleanup":
        return ("done",) if req["model_cache_root"] else ("skipped",)
    return ("done",)


def _differences(where: str, recorded: Any, recomputed: Any):
    """(field, recorded, recomputed) for each leaf where the two disagree."""
    if isinstance(recorded, Mapping) and isinstance(recomputed, Mapping):
        for key in dict.fromkeys([*recorded, *recomputed]):
            yield from _differences(f"{where}.{key}", recorded.get(key), recomputed.get(key))
    elif isinstance(recorded, list) and isinstance(recomputed, list) and len(recorded) == len(recomputed):
        for i, (a, b) in enumerate(zip(recorded, recomputed, strict=True)):
            yield from _differences(f"{where}[{i}]", a, b)
    elif not _same(recorded, recomputed):
        yield where, recorded, recomputed


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def verify(root: Path) -> dict[str, Any]:
    """The evidence-verify.v1 payload; ``ok`` only when every check agrees."""
    if not root.is_dir():
        raise contract.UsageError("evidence.not_a_folder", f"{root} is not a folder", "pass an evidence folder")
    doc = manifest.load(root)
    if doc is None:
        raise contract.InputError("evidence.manifest_missing", f"{root} has no {manifest.NAME}: not an evidence "
                                  "folder", "pass the --out folder of collect_pr_evidence.py run")
    verifier = Verifier(root)
    verifier.files(doc)
    verifier.documents(doc)
    verifier.campaign(doc)
    verifier.steps(doc)
    verifier.markdown(doc)
    if doc["state"] != "complete":
        verifier.add(manifest.NAME, "manifest", "state complete", f"state {doc['state']}")
    return {"ok": not verifier.findings, "dir": str(root), "findings": verifier.findings,
            "checked": verifier.checked}
