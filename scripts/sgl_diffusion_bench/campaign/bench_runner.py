"""Run a campaign of `sglang generate` requests and judge every cell on its evidence.

A cell counts only when: the engine stayed on the native backend (the first diffusers-fallback line stops it at
once), the log shows no failure (the engine exits 0 when generation fails), BCG cells show a capture and no
invalidating marker, the perf dump parses strictly, at least one output file exists (sha256 recorded), and no
foreign process used the leased GPUs at the cell's boundaries. Its output bytes must equal its comparator's at a
quality level that promises the same bytes (validity.py); a cell that does not count carries no numbers. Judging works on one request's evidence
(``request_path.judge_request``), not on a process, so a warm-engine mode can reuse it unchanged.

The report (bench-report.v1) is written after every cell, so Ctrl-C or a crash leaves a valid partial report.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, TextIO

from .. import assets, contract, fileio, model_cache, presets, work_dirs
from ..engine import command_builder
from . import (campaign_context, design, engine_mode, engine_starts, manifest_campaign, request_setup,
               run_claim, run_record, sequential, warm_campaign)
from ..judging import engine_args, host_load, request_path, validity
from ..results import report, request_verdicts, stats
from .campaign_context import CampaignContext, Site
from ..judging.cell import Cell, Report
from ..presets import Preset

TOOL = "bench_diffusion_denoise"
REPORT_SCHEMA = Report.SCHEMA


class Progress:
    """One status line per cell on stderr."""

    def __init__(self, total: int, stream: TextIO | None = None):
        self.total = total
        self.stream = stream or sys.stderr

    def start(self, cell: Cell) -> None:
        where = f"round {cell.round} {cell.position}" if cell.round else "single run"
        print(f"[cell {cell.index + 1}/{self.total}] {cell.arm} ({where}) starting", file=self.stream, flush=True)

    def done(self, cell: Cell) -> None:
        e2e, denoise = cell.metric("e2e_ms"), cell.metric("denoise_ms")
        figures = ""
        if e2e is not None:
            figures = f" e2e {e2e:.1f} ms, denoise " + (f"{denoise:.1f} ms" if denoise is not None else "n/a")
        reasons = f" — {'; '.join(cell.reasons[:3])}" if cell.reasons else ""
        wall = f"{cell.wall_s:.1f} s" if cell.wall_s is not None else "n/a"
        print(f"[cell {cell.index + 1}/{self.total}] {cell.arm}: {cell.status.upper()} after {wall}{figures}"
              f"{reasons}", file=self.stream, flush=True)


def _empty_cell(slot: design.Slot, argv: Sequence[str], perf_dump_path: Path,
                request: dict[str, Any] | None) -> Cell:
    """A planned cell: skipped until its request runs."""
    return Cell(index=slot.index, arm=slot.arm, round=slot.round, position=slot.position, argv=list(argv),
                perf_dump_path=str(perf_dump_path), sample=slot.sample, request=request)


class CampaignRunner:
    """Builds every invocation first (a missing flag is refused before any GPU is held), then runs the cells."""

    def __init__(self, ctx: CampaignContext, *, asset_filenames: Mapping[str, str]):
        self.ctx = ctx
        self.preset, self.plan, self.settings, self.engine = ctx.preset, ctx.plan, ctx.settings, ctx.engine
        self._warm: warm_campaign.WarmCampaign | None = None
        self.looks: list[dict[str, Any]] = []  # --until-verdict: one entry per look at the change
        self._started_monotonic = time.monotonic()  # reset when the cells start (the time budget counts from there)
        self.report_path = ctx.report_path
        self._manifest_sizes: tuple[str, ...] | None = None  # a manifest's warm-up sizes, computed on first use
        assets_dir = work_dirs.assets_dir()  # one lookup of the checkout, not one per cell
        self.invocations = [self._build(slot, asset_filenames, assets_dir) for slot in self.plan.slots]
        self.cells = [_empty_cell(s, inv.argv, inv.perf_dump_path, None if s.request is None else
                                  manifest_campaign.cell_request(self._slot_preset(s), self.plan.manifest, s.request))
                      for s, inv in zip(self.plan.slots, self.invocations, strict=True)]
        self.engine_mode = engine_mode.choose(self.settings.engine_mode, self.engine,
                                              [inv.argv for inv in self.invocations])
        unique = dict.fromkeys((c, m) for inv in self.invocations for c, m in inv.warnings)
        self.warnings: list[dict[str, str]] = [{"code": c, "message": m} for c, m in unique]
        self.cleanup_entry: dict[str, Any] | None = None
        self.adapter: dict[str, Any] | None = None
        self._prepared: model_cache.PreparedCache | None = None
        self.last_document: dict[str, Any] | None = None  # the report as last written (also after Ctrl-C)
        self.claim: run_claim.RunClaim | None = None  # taken by check_fresh

    def _warmup_sizes(self) -> tuple[str, ...]:
        if self._manifest_sizes is None:
            self._manifest_sizes = manifest_campaign.warmup_resolutions(self.preset, self.plan.manifest)
        return self._manifest_sizes

    def _slot_preset(self, slot: design.Slot) -> Preset:
        """The preset as this slot's request runs it: its manifest request's fields, then the arm's own."""
        fields, _ = design.arm_request_fields(self.plan.arms[slot.arm].extra_args, presets.OVERRIDABLE_FIELDS)
        preset = self.preset if slot.request is None else \
            manifest_campaign.request_preset(self.preset, self.plan.manifest, slot.request, self._warmup_sizes())
        return presets.customised([preset], fields, None)[0]

    def _build(self, slot: design.Slot, asset_filenames: Mapping[str, str],
               assets_dir: Path) -> command_builder.Invocation:
        arm = self.plan.arms[slot.arm]
        _, arm_flags = design.arm_request_fields(arm.extra_args, presets.OVERRIDABLE_FIELDS)
        preset = self._slot_preset(slot)
        options = command_builder.RunOptions(
            label=self.settings.label, arm=None if self.plan.mode == "single" else arm.name, round=slot.round,
            position=slot.position_number, sample=slot.sample, quality=arm.quality, warmup=self.settings.warmup,
            request=None if slot.request is None else slot.request + 1,
            warmup_mode=self.settings.warmup_mode, warmup_steps=self.settings.warmup_steps,
            component_residency=self.settings.component_residency, performance_mode=self.settings.performance_mode,
            breakable_cuda_graph=arm.bcg,
            bcg_text_buckets=self.settings.bcg_text_buckets if arm.bcg else (),
            torch_compile=self.settings.torch_compile,
            extra_args=(*self.settings.extra_args, *campaign_context.port_args_for(self.engine)),
            arm_args=tuple(arm_flags),
            arm_flag_overrides=arm.flag_overrides, arm_options=arm.options)
        return command_builder.build_invocation(
            preset, options, self.engine, sglang_cli=self.ctx.cli_prefix,
            output_root=self.settings.output_root, assets_dir=assets_dir, caller_env=self.ctx.caller_env,
            model_path=self.ctx.model_path, asset_filenames=asset_filenames)

    def check_fresh(self) -> None:
        """Refuse to mix with an earlier campaign's files: same label in the same output dir."""
        taken = [str(inv.run_dir) for inv in self.invocations if inv.run_dir.exists()]
        if self.report_path.exists():
            taken.append(str(self.report_path))
        if taken:
            raise contract.PreconditionError(
                "run.label_taken", f"label {self.settings.label!r} was already used here: {taken[0]}",
                "choose a new --label (or another --output-dir); earlier results are never overwritten",
                details={"existing": taken[:10]})
        assets.require({p for inv in self.invocations for p in inv.required_assets})
        if self.settings.cleanup_model_cache:  # an unwritable ledger refuses now, not after the run
            model_cache.check_ledger(self.settings.ledger_path)
        # Atomic (O_EXCL + flock): a second campaign on this label now fails here, before anything runs.
        self.claim = run_claim.claim_run(self.report_path, self.settings.label,
                                         taken=[self.report_path, *(inv.run_dir for inv in self.invocations)])

    # -- running -------------------------------------------------------------------------------------------------

    def run(self, site: Site | None = None, progress: Progress | None = None) -> dict[str, Any]:
        """Run every cell at ``site`` (default: the context's own); always returns the (possibly partial) report,
        re-raising KeyboardInterrupt after it."""
        if site is not None:
            self.ctx = self.ctx.at(site)
        progress = progress or Progress(len(self.cells))
        self._started_monotonic = time.monotonic()
        self.settings.output_root.mkdir(parents=True, exist_ok=True)
        if self.claim is not None:
            self.claim.mark_started()
        exit_reason = "error"
        try:
            with self._model_cache() as prepared, self._engines(prepared) as warm:
                for index, (cell, invocation) in enumerate(zip(self.cells, self.invocations, strict=True)):
                    progress.start(cell)
                    try:
                        if warm is not None:
                            warm.run_cell(cell, invocation, index)
                        else:
                            self._run_cell(cell, invocation, prepared)
                    except KeyboardInterrupt:
                        cell.status = "interrupted"
                        cell.reasons.append("run.interrupted: Ctrl-C during this cell")
                        raise
                    finally:
                        self.write_report()
                    progress.done(cell)
                    if self._stop_after(index):
                        break
                exit_reason = validity.exit_reason(self.cells)
        except KeyboardInterrupt:
            self._finish("interrupted")
            raise
        except BaseException:
            self._finish(exit_reason)
            raise
        return self._finish(exit_reason)

    def _stop_after(self, index: int) -> bool:
        """--until-verdict: at the end of each round, look at the change; True when the campaign may stop."""
        rule = self.settings.stopping
        if rule is None:
            return False
        slot = self.plan.slots[index]
        following = self.plan.slots[index + 1] if index + 1 < len(self.plan.slots) else None
        if slot.round is None or (following is not None and following.round == slot.round):
            return False
        if slot.round < rule.min_rounds:
            return False
        self.looks.append(sequential.look(rule, self.cells[:index + 1], self.plan.baseline_arm,
                                          self.plan.candidate_arm, slot.round))
        stop = self.looks[-1]["stop"]
        if stop is None and self.settings.time_budget_s is not None and \
                time.monotonic() - self._started_monotonic >= self.settings.time_budget_s:
            stop = self.looks[-1]["stop"] = "budget"  # the time budget is spent: the verdict stands as it is
        if stop is None:
            return False
        print(f"[until_verdict] stop after round {slot.round}: {stop} ({self.looks[-1]['verdict']})",
              file=sys.stderr, flush=True)
        del self.cells[index + 1:]  # planned rounds that were not needed are not part of the campaign
        del self.invocations[index + 1:]
        return True

    def rounds_run(self) -> int:
        return max((c.round for c in self.cells if c.round is not None and c.status != "skipped"),
                   default=0)

    @contextlib.contextmanager
    def _engines(self, prepared) -> Iterator[warm_campaign.WarmCampaign | None]:
        """Warm mode: the campaign's resident engines, shut down however the campaign ends."""
        if self.engine_mode["mode"] != "warm":
            yield None
            return
        with warm_campaign.warm_engines(self.ctx, self.cells, self.invocations, prepared) as warm:
            self._warm = warm
            yield warm

    @contextlib.contextmanager
    def _model_cache(self) -> Iterator[model_cache.PreparedCache | None]:
        if self.settings.model_cache_root is None:
            yield None
            return
        if not self.preset.local_model:  # a local model is already on disk; a hub model must fit first
            preflight = model_cache.disk_preflight(self.preset.model, None, self.settings.model_cache_root,
                                                   self.settings.seed_caches, environ=self.ctx.caller_env)
            if preflight.get("outcome") == "unknown_size":
                self.warnings.append({"code": "cache.unknown_size", "message": "the model's size is unknown (no hub "
                                      "metadata, no cached snapshot): the download may fill the disk"})
        if self.settings.cleanup_model_cache:  # what a killed run left is removed (and ledgered) first
            self.warnings += model_cache.reclaim_for_run(self.settings.model_cache_root, self.settings.ledger_path)
        prepared = model_cache.prepare_child_cache(self.settings.model_cache_root, self.preset.name,
                                                   self.settings.label, self.settings.seed_caches, held_by="run")
        self._prepared = prepared
        yield prepared

    def _finish(self, exit_reason: str) -> dict[str, Any]:
        prepared = self._prepared
        if prepared is not None:  # cleaned when asked, else handed to the user; the run's hold ends here
            self.cleanup_entry = model_cache.finish_run_child(
                prepared, cleanup=self.settings.cleanup_model_cache, reason=exit_reason,
                ledger_path=self.settings.ledger_path, model=self.preset.name, label=self.settings.label)
        return self.write_report(final=True)

    def _run_cell(self, cell: Cell, invocation: command_builder.Invocation,
                  prepared: model_cache.PreparedCache | None) -> None:
        request = request_setup.prepare(invocation, self.ctx.engine_env(prepared), self.ctx.markers)
        facts = engine_args.EngineRunFacts(self.ctx.markers)

        if invocation.quality is not None:
            cell.quality = dict(invocation.quality)  # the level the engine ran, aliases resolved
        adapter = request_path.run_cold(
            cell, argv=request.argv, env=dict(request.env), run_dir=request.run_dir, gate=request.gate, perf_dump_path=invocation.perf_dump_path, output_dir=invocation.output_dir,
            output_stem=invocation.output_file_stem, task=self.preset.task, timeout_s=self.settings.cell_timeout_s,
            echo=sys.stderr if self.settings.echo_engine else None, foreign_check=self.ctx.lease.foreign_check,
            observe=facts.feed, on_started=lambda: contract.prepare_validator(REPORT_SCHEMA),  # built while it runs
            what=f"cell {cell.index + 1}/{len(self.cells)} {cell.arm}: a cold engine's start, request and exit")
        cell.engine_run = facts.to_json()
        if adapter is not None:
            self.adapter = adapter

    # -- reporting -----------------------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        arms = self.plan.arms
        baseline = self.plan.baseline_arm or next(iter(arms))
        # outputs first: a cell whose bytes break its level's contract is invalid before any statistic is taken
        output_quality = validity.apply_output_checks(self.cells, {n: a.to_json() for n, a in arms.items()},
                                                      baseline, self.engine.quality_values)
        rule = self.settings.stopping
        confidence = {"confidence": rule.look_confidence} if rule is not None else {}  # what the looks used
        summary = stats.summarize(self.cells, list(arms), self.plan.baseline_arm, self.plan.candidate_arm,
                                  discard_outliers=self.settings.discard_outliers, **confidence,
                                  threshold_pct=self.settings.threshold_pct,
                                  primary_metric=self.settings.primary_metric)
        summary["output_quality"] = output_quality
        summary["host_contention"] = host_load.summary(self.cells)
        validity.apply_to_comparison(summary["comparison"], output_quality)
        if rule is not None:
            sequential.apply_to_comparison(summary["comparison"], rule, self.looks)
        if self.plan.manifest is not None:  # which shapes moved: each request judged on its own cells
            summary["requests"] = request_verdicts.per_request(self.cells, summary["comparison"], output_quality,
                                                               self.settings.primary_metric)
        return summary

    def report(self) -> dict[str, Any]:
        # Every planned cell counts: a skipped, contended or interrupted cell leaves the campaign incomplete.
        ok = bool(self.cells) and all(c.valid for c in self.cells)
        summary = self.summary()
        if summary["output_quality"] is not None and not summary["output_quality"]["passed"]:
            ok = False
        if self.cleanup_entry is not None and not self.cleanup_entry.get("ok", False):
            ok = False
        adapter = self._warm.adapter if self._warm is not None else self.adapter
        engine = {**self.engine.to_json(), "adapter": adapter,
                  **run_record.what_ran(self.ctx, self.cells, self._warm.starts if self._warm is not None else ())}
        rounds = self.plan.rounds
        if self.settings.stopping is not None:  # the rounds the campaign kept, not the budget
            rounds = max((c.round for c in self.cells if c.round is not None), default=rounds)
        doc = contract.envelope(
            REPORT_SCHEMA, TOOL, ok=ok,
            campaign={"mode": self.plan.mode, "preset": self.preset.name, "label": self.settings.label,
                      "rounds": rounds, "threshold_pct": self.settings.threshold_pct,
                      "primary_metric": self.settings.primary_metric, "baseline_arm": self.plan.baseline_arm,
                      "candidate_arm": self.plan.candidate_arm, "discard_outliers": self.settings.discard_outliers,
                      "arms": run_record.arms_as_run(self.plan, self.invocations),
                      "order": [o for o in self.plan.to_json()["order"] if o["round"] <= rounds],
                      "samples": self.plan.samples,
                      "stopping": (sequential.record(self.settings.stopping, self.looks, self.rounds_run())
                                   if self.settings.stopping is not None else
                                   {"rule": "fixed", "description": f"{self.plan.rounds} round(s) as planned",
                                    "rounds_run": self.rounds_run()}),
                      **({"manifest": self.plan.manifest.to_json()} if self.plan.manifest is not None else {})},
            engine=engine, environment=dict(self.ctx.site.environment),
            plan={"output_dir": str(self.settings.output_root), "report_path": str(self.report_path),
                  "gpus": self.ctx.lease.to_json(),
                  "reproduce": run_record.reproduce_entries(self.ctx, self.cells, self.invocations, self._prepared),
                  "caches": run_record.cache_roots(self.ctx, self.invocations, self._prepared),
                  "invocations": [inv.to_json() for inv in self.invocations]},
            cells=[c.to_json() for c in self.cells], summary=summary, warnings=self.warnings)
        doc["engines"] = {**(self._warm.to_json() if self._warm is not None else
                             engine_starts.cold_engines_block(self.cells, self.settings.primary_metric,
                                                             self.settings.threshold_pct)), "choice": self.engine_mode}
        if self.cleanup_entry is not None:
            doc["cleanup"] = self.cleanup_entry
        return doc

    def write_report(self, final: bool = False) -> dict[str, Any]:
        doc = self.report()
        if final and self.settings.write_report:
            paths = report.render_report(doc, self.settings.output_root / f"{self.preset.name}__{self.settings.label}")
            doc["artifacts"] = {"report_md": paths["markdown"], "plot_png": paths["plot"]}
        contract.check_document(doc)
        fileio.atomic_write_text(self.report_path, contract.dumps(doc) + "\n")  # a reader never sees half a report
        self.last_document = doc
        return doc
