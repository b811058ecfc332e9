"""One serving A/B: both arms' servers up, each load point's trace replayed in A1 B1 B2 A2 blocks per round, the
servers stopped, their logs judged by the campaign's gates, and the figures, outputs and verdicts put together.

Both servers stay up for the whole run (started together, so their model loads overlap) and only one of them gets
load at a time: the block order keeps drift out of the comparison. On a GPU both servers hold their weights on the
same device at once, so the model must fit twice.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Sequence

from .. import contract, progress
from ..engine import engine_process
from ..campaign import request_setup
from ..judging import engine_args, host_load, log_markers
from . import load, metrics, server, verdict
from ..engine.warm_engine import process_group_members
from ..engine.request_manifest import RequestSpec

ARMS = ("A", "B")
REQUESTS_LOG = "requests.jsonl"  # every measured request as it completes: what a Ctrl-C mid-run keeps


@dataclasses.dataclass(frozen=True)
class ServingRequest:
    """Everything one run needs, checked (by the CLI) before anything starts."""

    model_path: str
    sglang_cli: tuple[str, ...]
    engine_version: str | None
    shared_args: tuple[str, ...]
    arm_args: dict[str, tuple[str, ...]]
    specs: tuple[RequestSpec, ...]
    manifest: dict[str, Any] | None
    points: tuple[load.LoadPoint, ...]
    requests: int | None
    duration_s: float | None
    rounds: int
    warmup_requests: int
    slo_ms: float | None
    seed: int
    ports: dict[str, int | None]
    startup_timeout_s: float
    output_dir: Path
    use_cpu_adapter: bool
    threshold_pct: float
    resamples: int
    confidence: float
    min_rounds: int
    endpoint: str = load.IMAGES  # load.VIDEOS for a video preset
    input_image: Path | None = None  # what an image-to-video preset's jobs upload

    def argv(self, arm: str, port: int, engine_ports: Sequence[str]) -> list[str]:
        return server.serve_argv(self.sglang_cli, self.model_path, port, [*self.shared_args, *self.arm_args[arm]],
                                 engine_ports)


def _ports(request: ServingRequest) -> dict[str, int]:
    chosen = {arm: request.ports[arm] for arm in ARMS if request.ports.get(arm) is not None}
    server.check_given_ports(chosen)
    for arm in ARMS:
        if arm not in chosen:
            chosen[arm] = engine_process.free_port(server.PORTS_PER_SERVER, avoid=server.server_ports(chosen))
    return chosen


def _engine_ports(ports: dict[str, int]) -> dict[str, list[str]]:
    """Each arm's master/scheduler ports: fresh, and apart from every server's port and broker and each other."""
    taken, chosen = server.server_ports(ports), {}
    for arm in ARMS:
        chosen[arm] = engine_process.port_args(avoid=taken)
        taken |= {int(port) for port in chosen[arm][1::2]}
    return chosen


def _env(request: ServingRequest) -> dict[str, str]:
    """Both servers' environment through the one request set-up (the CPU adapter with the caller's switches)."""
    caller = dict(os.environ)
    caller.pop("PYTHONDONTWRITEBYTECODE", None)
    caller["PYTHONUNBUFFERED"] = "1"  # the server's log reaches its file line by line, not when a buffer fills
    return request_setup.EngineEnv.of(caller, use_cpu_adapter=request.use_cpu_adapter).child_env()


def _judge_log(request: ServingRequest, spec: server.ServerSpec) -> dict[str, Any]:
    text = spec.log_path.read_text(encoding="utf-8", errors="replace") if spec.log_path.is_file() else ""
    markers = log_markers.markers_for_version(request.engine_version)
    gate = engine_args.log_gate(markers, list(spec.argv), quality=None)
    for line in text.split("\n"):
        gate.feed(line)
    return gate.verdict().to_json()


def _run_blocks(request: ServingRequest, servers: dict[str, server.Server], traces: Sequence[load.Trace],
                requests_log: Path) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    warmups: dict[str, list[dict[str, Any]]] = {}
    for arm in ARMS:
        with progress.phase(f"server {arm}: {request.warmup_requests} warm-up request(s)"):
            warmups[arm] = [r.to_json() for r in load.warm(servers[arm].spec.base_url, request.specs,
                                                             request.warmup_requests, request.endpoint,
                                                             request.input_image)]
    points = []
    plan = verdict.block_plan(request.rounds)

    def host() -> dict[str, Any]:  # other processes only: our own servers are busy by design
        return host_load.sample(exclude=set().union(*(process_group_members(s.pgid) for s in servers.values())))

    for trace in traces:
        blocks = []
        for number, (arm, round_no, position) in enumerate(plan, 1):
            before = host()
            where = {"load_point": trace.point.label, "block": number, "arm": arm, "round": round_no,
                     "position": position}

            def keep(result: load.RequestResult, where: dict[str, Any] = where) -> None:
                with open(requests_log, "a", encoding="utf-8") as log:
                    log.write(json.dumps(contract.redact_values({**where, **result.to_json()}), sort_keys=True) + "\n")
            with progress.phase(f"{trace.point.label}: block {number}/{len(plan)} ({position})"):
                results, duration = load.run_trace(servers[arm].spec.base_url, trace, request.specs,
                                                   request.duration_s, on_result=keep, endpoint=request.endpoint,
                                                   image=request.input_image)
            blocks.append({"arm": arm, "round": round_no, "position": position, "duration": duration,
                           "metrics": metrics.block_metrics(results, duration, request.slo_ms),
                           "requests": results, "host": host_load.gate(before, host())})
        points.append({"trace": trace, "blocks": blocks})
    return points, warmups


def _point_doc(request: ServingRequest, point: dict[str, Any]) -> dict[str, Any]:
    blocks = point["blocks"]
    arms = {}
    hashes: dict[str, dict[str, set[str]]] = {arm: {} for arm in ARMS}
    for arm in ARMS:
        mine = [b for b in blocks if b["arm"] == arm]
        arms[arm] = metrics.pooled([b["requests"] for b in mine], [b["duration"] for b in mine], request.slo_ms)
        for block in mine:
            for result in block["requests"]:
                if result.success and result.output_sha256:
                    hashes[arm].setdefault(result.request_id, set()).add(result.output_sha256)
    comparison = verdict.compare(blocks, threshold_pct=request.threshold_pct, resamples=request.resamples,
                                 seed=request.seed, confidence=request.confidence, min_rounds=request.min_rounds)
    shapes = verdict.shape_changes(blocks, threshold_pct=request.threshold_pct, resamples=request.resamples,
                                   seed=request.seed, confidence=request.confidence, min_rounds=request.min_rounds)
    return {"load": point["trace"].to_json(), "label": point["trace"].point.label, "arms": arms,
            "comparison": comparison, "shapes": shapes, "output_identity": metrics.output_identity(hashes),
            "contended_blocks": [n for n, b in enumerate(blocks) if b["host"]["contended"]],
            "blocks": [{"arm": b["arm"], "round": b["round"], "position": b["position"], "metrics": b["metrics"],
                        "host": b["host"], "requests": [r.to_json() for r in b["requests"]]} for b in blocks]}


def _interrupted(requests_log: Path, servers_doc: dict[str, Any]) -> contract.ToolError:
    """Ctrl-C (or SIGTERM) during the run: the error names the file that holds every request completed so far."""
    try:
        kept = sum(1 for line in requests_log.read_text(encoding="utf-8").splitlines() if line.strip())
    except OSError:
        kept = 0
    return contract.ToolError(
        "run.interrupted", f"interrupted before the run finished; the servers were stopped; the {kept} request(s) "
        f"measured so far are in {requests_log}",
        "re-run the command for a report; the partial per-request results stay in that file",
        details={"requests_log": str(requests_log), "completed_requests": kept, "servers": servers_doc},
        exit_code=contract.ExitCode.INTERRUPTED)


def run(request: ServingRequest) -> dict[str, Any]:
    """Run the A/B; the serving-report.v1 payload (without the envelope). Servers are stopped on every way out."""
    ports = _ports(request)
    engine_ports = _engine_ports(ports)
    env = _env(request)
    request.output_dir.mkdir(parents=True, exist_ok=True)
    specs = [server.ServerSpec(arm, tuple(request.argv(arm, ports[arm], engine_ports[arm])), env, ports[arm],
                               request.output_dir / f"server-{arm.lower()}") for arm in ARMS]
    traces = [load.build_trace(p, len(request.specs), requests=request.requests, duration_s=request.duration_s,
                               seed=request.seed) for p in request.points]
    servers_doc: dict[str, Any] = {}
    requests_log = request.output_dir / REQUESTS_LOG
    requests_log.write_text("", encoding="utf-8")
    try:
        with server.running(specs, request.startup_timeout_s) as started:
            by_arm = {s.spec.arm: s for s in started}
            for arm, srv in by_arm.items():
                servers_doc[arm] = {"pgid": srv.pgid, "port": srv.spec.port, "healthy_after_s": srv.healthy_after_s}
            points, warmups = _run_blocks(request, by_arm, traces, requests_log)
    except KeyboardInterrupt:  # the servers are stopped by now; say what was measured and where it is
        raise _interrupted(requests_log, servers_doc) from None
    arms_doc = {}
    for spec in specs:
        gates = _judge_log(request, spec)
        arms_doc[spec.arm] = {"args": list(request.arm_args[spec.arm]), "argv": contract.redact_values(list(spec.argv)),
                              "base_url": spec.base_url, "log": str(spec.log_path), **servers_doc[spec.arm],
                              "gates": gates, "warmup": warmups[spec.arm],
                              "status": "valid" if gates["valid"] else "invalid",
                              "reasons": [r["message"] for r in gates["reasons"]]}
    point_docs = [_point_doc(request, p) for p in points]
    failed = sum(p["arms"][arm]["failed_requests"] for p in point_docs for arm in ARMS)
    reasons = [f"arm {arm}: {reason}" for arm in ARMS for reason in arms_doc[arm]["reasons"]]
    if failed:
        reasons.append(f"{failed} request(s) failed")
    status = "valid" if not reasons else "invalid"
    comparisons = [p["comparison"] for p in point_docs]
    return {"status": status, "reasons": reasons, "model_path": request.model_path,
            "engine_version": request.engine_version, "output_dir": str(request.output_dir),
            "shared_args": list(request.shared_args), "arms": arms_doc,
            "requests_source": request.manifest or {"kind": "command_line"},
            "request_specs": [s.to_json() for s in request.specs],
            "settings": {"rounds": request.rounds, "blocks_per_point": 4 * request.rounds,
                         "requests_per_block": request.requests, "duration_s": request.duration_s,
                         "warmup_requests": request.warmup_requests, "slo_ms": request.slo_ms, "seed": request.seed,
                         "threshold_pct": request.threshold_pct, "confidence": request.confidence,
                         "resamples": request.resamples, "min_rounds": request.min_rounds,
                         "requests_log": str(requests_log), "endpoint": request.endpoint,
                         "video_poll_s": load.VIDEO_POLL_S if request.endpoint == load.VIDEOS else None,
                         "input_image": None if request.input_image is None else str(request.input_image),
                         "block_order": "A1 B1 B2 A2 per round, the same trace in every block"},
            "load_points": point_docs,
            "outputs_identical": all(p["output_identity"]["identical"] for p in point_docs),
            "verdict": verdict.overall(comparisons) if status == "valid" else "invalid"}
