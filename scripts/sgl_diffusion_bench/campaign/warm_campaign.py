"""Warm-engine campaigns: one resident engine per engine configuration, serving the campaign's requests in plan order.

Arms whose commands differ only in per-request options share an engine; arms that differ in an engine flag (eager vs
BCG), a config file's engine keys or the environment get one engine each. Which flags are per-request is the
engine's own answer (the probe's ``request_flags``: what ``SamplingParams.add_cli_args`` adds, i.e. what
``DiffGenerator.generate`` takes per call, such as steps, guidance, size, seed, prompt); where the probe cannot tell,
only output paths, ports, seed and prompt count as per-request. All engines stay resident when memory allows (the
first engine's footprint is measured before a second starts) and requests interleave exactly as planned (A/B/B/A);
otherwise engines alternate in blocks of consecutive slots, restarting between blocks. Each engine is started, built
and warmed the way a cold cell is (the same flags, so the same startup warmup), then serves ``warmup_requests``
uncounted warm-up requests for each distinct request it will serve (a cold cell warms on its own request), then the
measured ones. Every measured request is judged by the same code as a cold cell
(``request_path.judge_request``), on its own log segment, perf dump and output. Where the other engines fit beside the
first (engine_overlap.py: on a GPU by default), they are launched as soon as the first has loaded and finished before
the first measured request, so their loads overlap its warm-up but never a measured request.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import contract, model_cache, progress
from ..engine import command_builder, engine_overlap, probe_interpreter, warm_engine
from . import request_setup, warm_grouping
from ..judging import engine_args, host_load, log_gates, output_check, request_path
from .campaign_context import CampaignContext
from ..judging.cell import Cell
from ..engine import adapter_record
from ..engine.inside.cpu_adapter import sgl_cpu_adapter
from .engine_starts import engines_block, EngineStart

RESIDENCY_MARGIN = 1.25  # a second engine must fit with this much room over the first one's measured footprint
SCHEDULES = ("auto", "interleaved", "alternating_blocks")  # auto: interleaved when every engine fits at once
BoundarySample = tuple[list[dict[str, Any]], Callable[[], dict[str, Any]]]  # foreign GPU processes, host sample


class WarmCampaign:
    """Runs a campaign's planned cells on warm engines; the runner owns the cells (judged here in place) and writes
    the report."""

    def __init__(self, ctx: CampaignContext, cells: list[Cell], invocations: list[command_builder.Invocation],
                 prepared: model_cache.PreparedCache | None):
        self.ctx, self.cells, self.invocations, self.prepared = ctx, cells, invocations, prepared
        self.settings, self.lease = ctx.settings, ctx.lease
        self.cli_len = len(ctx.cli_prefix)
        self.adapter: dict[str, Any] | None = None  # the CPU adapter's account, once its lines appear
        request_flags = ctx.engine.request_flags
        grouping = warm_grouping
        self.key_of_cell = grouping.group_by_engine([
            grouping.engine_key(inv.argv[self.cli_len:], inv.config_content, request_flags,
                                grouping.invocation_env(inv))
            for inv in invocations])
        self.request_key_of_cell = [grouping.request_key(inv.argv[self.cli_len:], inv.config_content, request_flags)
                                    for inv in invocations]
        keys = sorted(set(self.key_of_cell))
        self.keys = keys
        self.grouping = {"request_flags_source": ctx.engine.method if request_flags is not None else "fallback",
                         "engine_configurations": len(keys)}
        self.starts: list[EngineStart] = []
        self.resident: dict[int, EngineStart] = {}
        self.failed: dict[int, EngineStart] = {}
        self.own_gpu_pids: set[int] = set()
        self.startup_gates: dict[str, log_gates.RequestLogGate] = {}  # a launched engine's, awaited by _finish
        self.residency: dict[str, Any] = {"engines_needed": len(keys), "checked": len(keys) < 2, "resident": True,
                                          "reason": "one engine configuration" if len(keys) < 2 else None}
        self.schedule = "interleaved"
        self.overlap = engine_overlap.not_decided(ctx.settings.engine_overlap, len(keys))

    # -- engines -------------------------------------------------------------------------------------------------

    def _arms_of(self, key_index: int) -> list[str]:
        pairs = zip(self.cells, self.key_of_cell, strict=True)
        return list(dict.fromkeys(c.arm for c, k in pairs if k == key_index))

    def _start(self, key_index: int) -> EngineStart:
        return self._finish(self._launch(key_index))

    def _launch(self, key_index: int) -> EngineStart:
        """Spawn the engine of ``key_index``; its log is read (and written) by a thread until ``_finish`` awaits it."""
        inv = self.invocations[self.key_of_cell.index(key_index)]
        number = len(self.starts) + 1
        engine_dir = self.settings.output_root / f"{inv.run_id.split('__')[0]}__{self.settings.label}__warm-e{number}"
        # the engine's own directory and config copy: each request's run dir is created when it runs
        request = request_setup.prepare(inv, self.ctx.engine_env(self.prepared), self.ctx.markers, run_dir=engine_dir)
        argv = warm_engine.driver_argv(self.ctx.engine_python, list(request.argv[self.cli_len:]))
        start = EngineStart(f"e{number}", key_index, self._arms_of(key_index), argv, engine_dir / "engine.log",
                            contract.utc_now(),  # how its footprint is measured: RSS on CPU, NVML on a GPU
                            memory_kind="device" if self.lease.on_gpu else "process_rss",
                            facts=engine_args.EngineRunFacts(self.ctx.markers))
        self.starts.append(start)
        self.startup_gates[start.id] = request.gate
        print(f"[engine {start.id}] starting for arm(s) {', '.join(start.arms)}", file=sys.stderr, flush=True)
        child_env, echo = dict(request.env), sys.stderr if self.settings.echo_engine else None
        engine = probe_interpreter.adopt(self.ctx.engine_python, start.id, argv, child_env, start.log_path,
                                         cwd=engine_dir, echo=echo) or warm_engine.WarmEngine(
            start.id, argv, child_env, start.log_path, cwd=engine_dir, echo=echo)
        start.engine = engine
        start.gpu_before = self._gpu_snapshot()
        engine.start()
        start.launched_at = engine_overlap.utc_of(engine.started_monotonic)
        start.status = "launched"
        return start

    def _finish(self, start: EngineStart) -> EngineStart:
        """Await a launched engine's READY (its load, timed by the log thread from the launch), then serve its warm-up
        requests; the first engine decides here, once loaded, whether the others launch beside its warm-up."""
        engine, key_index = start.engine, start.key_index
        first = self.key_of_cell.index(key_index)
        engine_dir, gate = start.log_path.parent, self.startup_gates.pop(start.id)

        def on_line(line: str) -> str | None:
            self._note_adapter(start, line)
            start.facts.feed(line)
            return gate.feed(line)

        timeout = self.settings.cell_timeout_s  # counted from the launch, as a start that is awaited at once
        if timeout is not None:
            timeout = max(timeout - (time.monotonic() - engine.started_monotonic), 0.01)
        with progress.phase(f"engine {start.id}: loading the model", f"its log: {start.log_path}") as ticker:
            ready = engine.wait_ready(on_line, timeout, ticker)
            ticker.outcome = "done" if ready.status == "ok" else f"ended ({ready.status})"
        start.load_s = (engine.ready_monotonic or time.monotonic()) - engine.started_monotonic
        start.ready_at = engine_overlap.utc_of(engine.ready_monotonic) if engine.ready_monotonic else None
        verdict = gate.verdict()
        start.captures = verdict.bcg.captured_graphs
        start.standin_modules = verdict.standin_modules
        # Startup shows loading and the engine's own warmup; BCG capture may come with the first request instead.
        reasons = [f"{r.code}: {r.message}" for r in verdict.reasons if r.code != "bcg.no_capture"]
        if ready.status != "ok":
            reasons.insert(0, _segment_reason(ready, "while loading"))
        if not reasons and len(self.starts) == 1 and len(self.keys) > 1:
            self._consider_overlap(start)
        warmups = self._warmup_requests(key_index) if not reasons else []
        for n, warm_inv in enumerate(warmups, start=1):
            warm_dir = engine_dir / f"warmup{n}"
            config = request_setup.write_config(warm_inv, warm_dir)  # its own copy, as each measured request has
            args = warm_grouping.with_request_paths(warm_inv.argv[self.cli_len:], warm_dir / "warmup.perf.json",
                                                    warm_dir, "warmup", config)
            judged = Cell(index=first, arm=self.cells[first].arm)  # judged like a measured request, never counted
            with progress.phase(f"engine {start.id}: warm-up request {n} of {len(warmups)}") as ticker:
                segment = self._serve(start, judged, f"{start.id}-warmup{n}", args, warm_inv.quality_level,
                                      warm_dir / "warmup.perf.json", warm_dir, "warmup", warm_dir / "engine.log",
                                      ticker=ticker)
                ticker.outcome = "done" if judged.valid else f"ended ({judged.status})"
            start.warmup_s += segment.wall_s
            start.warmup_requests += 1
            if not judged.valid:
                reasons.append(f"engine.warmup_failed: warm-up request {n} was {judged.status}: "
                               + "; ".join(judged.reasons[:2]))
                break
        if start.memory_basis == "after warm-up":  # else taken after load: other engines were loading beside it
            start.memory_bytes = self._footprint(start, start.gpu_before)
        start.finished_monotonic = time.monotonic()
        start.finished_at = engine_overlap.utc_of(start.finished_monotonic)
        if reasons:
            start.status, start.reasons = "failed", reasons
            self.failed[key_index] = start
            self._close(start)
            print(f"[engine {start.id}] FAILED: {reasons[0]}", file=sys.stderr, flush=True)
        else:
            start.status = "serving"
            print(f"[engine {start.id}] ready after {start.load_s:.1f} s load + {start.warmup_s:.1f} s warm-up",
                  file=sys.stderr, flush=True)
        return start

    def _warmup_requests(self, key_index: int) -> list[command_builder.Invocation]:
        """``warmup_requests`` uncounted requests per distinct request this engine will serve, in plan order."""
        firsts: dict[tuple[str, ...], int] = {}
        for index, (engine, request) in enumerate(zip(self.key_of_cell, self.request_key_of_cell, strict=True)):
            if engine == key_index:
                firsts.setdefault(request, index)
        return [self.invocations[i] for i in firsts.values() for _ in range(self.settings.warmup_requests)]

    def _note_adapter(self, start: EngineStart, line: str) -> None:
        """The CPU adapter's lines and the memory evidence of this engine (the adapter may patch lazily, so
        requests add lines too)."""
        start.memory.feed(line)
        if sgl_cpu_adapter.TAG not in line:
            return
        start.adapter_lines.append(line)
        adapter = adapter_record.summarize(start.adapter_lines)
        if adapter is not None:
            self.adapter = adapter

    def _gpu_snapshot(self) -> tuple[set[int], dict[str, int]] | None:
        """GPU process ids and used memory per leased GPU (None on CPU)."""
        if not self.lease.on_gpu:
            return None
        return {p["pid"] for p in self.lease.gpu_processes()}, self.lease.gpu_memory_used()

    def _footprint(self, start: EngineStart, gpu_before: tuple[set[int], dict[str, int]] | None) -> int | None:
        """What this engine holds: its process group's RSS on CPU; on GPU the growth of used memory on the
        busiest leased GPU since just before it started (NVML pids may belong to another pid namespace, so GPU
        processes that appeared during the start are recorded as ours for the contention check)."""
        engine = start.engine
        if engine is None or engine.process is None:
            return None
        if gpu_before is None:
            return warm_engine.group_rss_bytes(engine.process.pid) or None
        pids_before, used_before = gpu_before
        pids_after, used_after = self._gpu_snapshot()
        self.own_gpu_pids |= pids_after - pids_before
        growth = [used_after[u] - used_before[u] for u in used_after if u in used_before]
        return max(growth) if growth and max(growth) > 0 else None

    def _close(self, start: EngineStart) -> None:
        if start.status == "launched" and start.engine is not None:
            start.engine.stop()  # still loading: a driver that has not printed READY reads no quit request
        if start.engine is not None and not start.engine.closed:
            start.shutdown_s = start.engine.close()
            start.closed_at = engine_overlap.utc_of(time.monotonic())
            start.wall_s = time.monotonic() - (start.engine.started_monotonic or time.monotonic())
        if start.status in ("serving", "launched"):
            start.status = "closed"
        self.resident = {k: s for k, s in self.resident.items() if s is not start}

    def close_all(self) -> None:
        """Every engine shut down at once: each close is mostly a wait for its process group to exit (no measured
        request runs any more), so the campaign waits for the slowest, not for the sum."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(len(self.starts), 1)) as pool:
            for done in [pool.submit(self._close, start) for start in self.starts]:
                done.result()
        self.resident = {}  # the threads' own removals may race; every engine is closed now

    def _decide_residency(self, first: EngineStart) -> None:
        """All engines resident when the measured footprint of the first fits the rest; else alternating blocks."""
        if self.settings.warm_schedule != "auto":
            self.schedule = self.settings.warm_schedule
            self.residency.update(checked=False, resident=self.schedule == "interleaved",
                                  reason=f"--warm-schedule {self.schedule} chosen by the caller")
            return
        others = len(self.keys) - 1
        available = self.lease.gpu_free_bytes() if self.lease.on_gpu else warm_engine.available_memory_bytes()
        need = int(first.memory_bytes * others * RESIDENCY_MARGIN) if first.memory_bytes else None
        resident = need is not None and available is not None and available >= need
        self.residency.update(checked=True, first_engine_bytes=first.memory_bytes, available_bytes=available,
                              needed_bytes=need, resident=resident,
                              memory_kind="device" if self.lease.on_gpu else "process_rss",
                              reason=("the other engine(s) fit beside the first" if resident else
                                      "not enough free memory for every engine at once" if need and available
                                      else "memory could not be measured: engines alternate to be safe"))
        self.schedule = "interleaved" if resident else "alternating_blocks"

    def _consider_overlap(self, first: EngineStart) -> None:
        """Once the first engine is READY: launch the others now, beside its warm-up, when they fit (engine_overlap).
        Its footprint is taken now; on a GPU it stays this after-load figure, as used device memory soon counts the
        others too (process RSS on CPU is per engine, taken after warm-up as ever)."""
        on_gpu = self.lease.on_gpu
        loaded = self._footprint(first, first.gpu_before)
        self.overlap = engine_overlap.decide(
            self.settings.engine_overlap, engines=len(self.keys), schedule=self.settings.warm_schedule,
            on_gpu=on_gpu, first_bytes=loaded,
            available_bytes=self.lease.gpu_free_bytes() if on_gpu else warm_engine.available_memory_bytes())
        if not self.overlap["overlapped"]:
            return
        if on_gpu:
            first.memory_bytes, first.memory_basis = loaded, "after load (the other engines loaded beside its warm-up)"
        if self.settings.warm_schedule != "auto":
            self._decide_residency(first)  # the caller's schedule, recorded as such
        else:
            self.schedule = "interleaved"
            self.residency.update(checked=True, first_engine_bytes=loaded, available_bytes=self.overlap[
                "available_bytes"], needed_bytes=self.overlap["needed_bytes"], resident=True,
                memory_kind=self.overlap["memory_kind"], reason="the other engine(s) fit beside the first "
                f"(its footprint after load x {engine_overlap.MARGIN_AFTER_LOAD:g})")
        for other in range(len(self.keys)):
            if other not in self.resident and other != first.key_index:
                self.resident[other] = launched = self._launch(other)
                if on_gpu:
                    launched.memory_basis = "not measured: it loaded while another engine of this campaign warmed up"

    def _launch_all_at_once(self) -> bool:
        """Before anything loads: launch every engine now when all fit by their weights on disk (engine_overlap)."""
        on_gpu = self.lease.on_gpu
        decided = engine_overlap.decide_at_launch(
            self.settings.engine_overlap, engines=len(self.keys), schedule=self.settings.warm_schedule, on_gpu=on_gpu,
            weights_bytes=engine_overlap.weights_on_disk(engine_overlap.model_path_of(self.invocations[0].argv)),
            available_bytes=self.lease.gpu_free_bytes() if on_gpu else warm_engine.available_memory_bytes())
        if decided is None:
            return False
        self.overlap = decided
        if self.settings.warm_schedule != "auto":
            self.schedule = self.settings.warm_schedule
        self.residency.update(checked=True, first_engine_bytes=None, available_bytes=decided["available_bytes"],
                              needed_bytes=decided["needed_bytes"], resident=True, memory_kind=decided["memory_kind"],
                              reason="every engine fits at once by its weights on disk "
                                     f"(x {engine_overlap.MARGIN_AT_LAUNCH:g})")
        for key_index in range(len(self.keys)):
            self.resident[key_index] = launched = self._launch(key_index)
            if on_gpu:
                launched.memory_basis = "not measured: every engine of this campaign loaded at once"
        return True

    def _engine_for(self, key_index: int) -> EngineStart:
        start = self.resident.get(key_index) or self.failed.get(key_index)
        if start is not None and (start.status != "serving" or (start.engine is not None and start.engine.alive)):
            return start  # a failed engine is not restarted: it would fail the same way, at the same cost
        if self.schedule == "alternating_blocks":
            for other in list(self.resident.values()):
                self._close(other)
        if not self.starts and self._launch_all_at_once():
            start = self._finish(self.resident[key_index])
        else:
            start = self._start(key_index)
        self.resident[key_index] = start
        launched = [s for s in self.resident.values() if s.status == "launched"]
        if launched:  # loading beside the first one's warm-up: finished before any measured request runs
            for other in launched:
                self._finish(other)
            self._note_overlaps()
        elif len(self.starts) == 1 and len(self.keys) > 1 and start.status == "serving":
            self._decide_residency(start)
            if self.schedule == "interleaved":  # start every engine before the first measured request
                for other in range(len(self.keys)):
                    if other not in self.resident:
                        self.resident[other] = self._start(other)
            self._note_overlaps()
        return start

    def _note_overlaps(self) -> None:
        """Which engine starts crossed (launch to end of warm-up), from the recorded instants."""
        spans = {s.id: (s.engine.started_monotonic, s.finished_monotonic) for s in self.starts
                 if s.engine is not None and s.engine.started_monotonic is not None}
        for start in self.starts:
            start.overlapped_with = engine_overlap.overlapping(spans).get(start.id, [])

    # -- requests ------------------------------------------------------------------------------------------------

    def _serve(self, start: EngineStart, cell: Cell, request_id: str, args: list[str],
               quality: str | None, perf_dump: Path, output_dir: Path, stem: str, log_path: Path,
               boundary: Callable[[], BoundarySample] | None = None,
               ticker: progress.Ticker | None = None) -> warm_engine.Segment:
        """One request on a warm engine, judged into ``cell`` by the same code as a cold cell (gated at the level
        the request runs at, ``quality``, as a cold cell is)."""
        gate = engine_args.log_gate(self.ctx.markers, args, quality=quality, prior_captures=start.captures,
                                    require_native=False)
        output_dir.mkdir(parents=True, exist_ok=True)

        def on_line(line: str) -> str | None:
            self._note_adapter(start, line)
            return gate.feed(line)

        before = boundary() if boundary else None
        segment = start.engine.serve(request_id, args, on_line, self.settings.cell_timeout_s, ticker)
        after = boundary() if boundary else None
        log_path.write_text("".join(line + "\n" for line in segment.lines), encoding="utf-8")
        verdict = gate.verdict()
        if cell.engine is not None:  # a measured request (a warm-up's cell has no engine)
            cell.engine["recaptures"] = verdict.bcg.captured_graphs - start.captures
        start.captures = verdict.bcg.captured_graphs
        start.standin_modules = verdict.standin_modules
        returncode = start.engine.process.poll() if segment.status == "exited" and start.engine.process else None

        def edges() -> request_path.Boundary:  # resolved after judging: the last host window overlaps it
            if not (before and after):
                return request_path.Boundary.unchecked()
            return request_path.Boundary(self.lease.foreign_check is not None, before[0], after[0], before[1](),
                                         after[1]())
        error = _segment_reason(segment, "during this request") \
            if segment.status in ("error", "exited") and not segment.stop_reason else None
        request_path.finish_cell(cell, verdict=verdict, returncode=returncode, stop_reason=segment.stop_reason,
                                 stop_line=segment.stop_line, stopped_after_s=segment.stopped_after_s,
                                 wall_s=segment.wall_s, perf_dump_path=perf_dump, output_dir=output_dir,
                                 output_stem=stem, task=self.ctx.preset.task, memory_kind=start.memory.kind,
                                 boundary=edges, request_error=error, requested=output_check.requested_shape(args))
        if segment.status in ("stopped", "timeout", "exited"):
            start.status = "failed"
            start.reasons.append(_segment_reason(segment, f"during request {request_id}"))
            self.failed[start.key_index] = start
            self._close(start)
        return segment

    def _boundary_sampler(self) -> Callable[[], BoundarySample]:
        """Foreign GPU processes now, and a host sample started now (its window overlaps the request or its
        judging), our resident engines excluded."""
        alive = [s.engine for s in self.starts if s.engine is not None and s.engine.alive]
        own = self.own_gpu_pids.union(*(engine.pids() for engine in alive))
        lease = self.lease
        return lambda: (lease.foreign_now(own), host_load.start_sample(exclude=own))

    def run_cell(self, cell: Cell, invocation: command_builder.Invocation, index: int) -> None:
        key_index = self.key_of_cell[index]
        start = self._engine_for(key_index)
        first = start.first_measured_cell is None
        cell.engine = {"id": start.id, "first_measured": first and start.status == "serving", "recaptures": None}
        cell.started_at = contract.utc_now()
        cell.log_path = str(invocation.run_dir / "engine.log")
        if invocation.quality is not None:
            cell.quality = dict(invocation.quality)  # the level the engine ran, aliases resolved (as cold)
        invocation.run_dir.mkdir(parents=True, exist_ok=False)
        if start.status != "serving":
            Path(cell.log_path).write_text("", encoding="utf-8")
            cell.status, cell.wall_s, cell.gates = "failed", 0.0, {"contention": {"checked": False}}
            cell.reasons = [f"engine.not_serving: engine {start.id} did not start or stopped: "
                            + "; ".join(start.reasons[:2])]
            return
        request_setup.write_config(invocation)
        segment = self._serve(start, cell, invocation.run_id, list(invocation.argv[self.cli_len:]),
                              invocation.quality_level, invocation.perf_dump_path, invocation.output_dir,
                              invocation.output_file_stem, Path(cell.log_path), boundary=self._boundary_sampler())
        if first:
            start.first_measured_cell = cell.index
        start.measured_s += segment.wall_s
        start.measured_requests += 1

    # -- reporting -----------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {**engines_block("warm", self.schedule, self.residency, [s.to_json() for s in self.starts],
                                self.cells, self.settings.primary_metric, self.settings.threshold_pct,
                                self.settings.warmup_requests, self.overlap), "grouping": self.grouping,
                "order": [{"cell": c.index, "arm": c.arm, "position": c.position, "engine": c.engine["id"]}
                          for c in self.cells if c.engine]}


def _segment_reason(segment: warm_engine.Segment, when: str) -> str:
    if segment.status == "timeout":
        return f"engine.timeout: no answer {when} within the cell timeout"
    if segment.status == "stopped":
        return f"{segment.stop_reason}: engine stopped {when} on this line: {segment.stop_line}"
    if segment.status == "error":
        return f"engine.request_failed: the request raised {when}: {segment.error}"
    return f"engine.exited: {segment.error or 'the engine exited'} {when}"


@contextlib.contextmanager
def warm_engines(ctx: CampaignContext, cells: list[Cell], invocations: list[command_builder.Invocation],
                 prepared: model_cache.PreparedCache | None) -> Iterator[WarmCampaign]:
    """The campaign's engines: shut down gracefully when it ends, stopped at once on Ctrl-C or an error (a driver
    still loading reads no quit request)."""
    campaign = WarmCampaign(ctx, cells, invocations, prepared)
    try:
        yield campaign
    except BaseException:
        for start in campaign.starts:
            if start.engine is not None:
                start.engine.stop()
        raise
    finally:
        campaign.close_all()

