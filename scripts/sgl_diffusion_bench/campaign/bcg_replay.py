"""BCG replay correctness (the seed PR's "persistent generator" evidence): does a warm BCG engine serve a changing
sequence of requests from the graphs it captured, with the same bytes as eager?

One warm eager engine and one warm BCG engine (same preset, same flags but BCG) each serve the same scripted
sequence: the warmed resolution with the preset's prompt and seed, a changed prompt, a changed seed, a repeat of the
first request, then one resolution the BCG engine did not capture at warmup. Reported: graphs captured at warmup,
recaptures while serving and requests that fell back to eager (only the uncaptured resolution may), per request and
per rank where the log names ranks, and whether every eager/BCG pair of outputs is byte-identical.

``bcg=False`` runs both engines eager: the sequence logic itself on an engine without CUDA graphs (CPU).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from .. import argv_tokens, contract, fileio
from ..engine import command_builder, engine_process, gpu, warm_engine
from . import campaign_context, request_setup
from ..judging import engine_args, log_gates, log_markers
from ..engine.capabilities import EngineCapabilities
from ..presets import Preset

SCHEMA = "bcg-replay.v1"
RANK = re.compile(r"\[(?:rank|Rank|RANK)[ =:]?(\d+)\]|\brank[ =:](\d+)\b")


@dataclasses.dataclass(frozen=True)
class ScriptedRequest:
    id: str
    what: str
    prompt: str
    seed: int
    width: int
    height: int
    captured_shape: bool  # the warmed (captured) resolution: a fallback here is a failure


def script(preset: Preset) -> list[ScriptedRequest]:
    """The sequence: warmed shape (prompt, changed prompt, changed seed, repeat of the first), then an uncaptured
    shape (three quarters of the warmed one, on the 16-pixel grid diffusion models need)."""
    if not (preset.width and preset.height):
        raise contract.PreconditionError("replay.no_shape", f"preset {preset.name!r} has no width/height to warm",
                                         "pick a preset with a fixed shape")
    w, h, seed, prompt = preset.width, preset.height, preset.seed, preset.prompt
    other_w, other_h = max(16, w * 3 // 4 // 16 * 16), max(16, h * 3 // 4 // 16 * 16)
    return [ScriptedRequest("r1", "warmed resolution, preset prompt and seed", prompt, seed, w, h, True),
            ScriptedRequest("r2", "changed prompt", prompt + ", at dusk", seed, w, h, True),
            ScriptedRequest("r3", "changed seed", prompt, seed + 1, w, h, True),
            ScriptedRequest("r4", "repeat of r1", prompt, seed, w, h, True),
            ScriptedRequest("r5", f"uncaptured resolution {other_w}x{other_h}", prompt, seed, other_w, other_h, False)]


def request_args(base: Sequence[str], request: ScriptedRequest, out_dir: Path) -> list[str]:
    """The engine's arguments with this request's prompt, seed, shape and output paths."""
    replace = {"--prompt": request.prompt, "--seed": str(request.seed), "--width": str(request.width),
               "--height": str(request.height), "--perf-dump-path": str(out_dir / f"{request.id}.perf.json"),
               "--output-path": str(out_dir), "--output-file-name": request.id}
    out: list[str] = []
    seen = set()
    for flag, _, tokens in argv_tokens.split_flags(base):
        if flag in replace:
            out.append(f"{flag}={replace[flag]}")
            seen.add(flag)
        else:
            out += tokens
    out += [f"{flag}={value}" for flag, value in replace.items() if flag not in seen]
    return out


def ranks_in(lines: Sequence[str]) -> dict[str, int]:
    """Capture lines per rank named in the line ("all" when the line names none)."""
    per: dict[str, int] = {}
    for line in lines:
        match = RANK.search(line)
        key = (match.group(1) or match.group(2)) if match else "all"
        per[key] = per.get(key, 0) + 1
    return per


class Replay:
    """Runs the script on an eager engine and on a BCG engine and compares them request by request."""

    def __init__(self, preset: Preset, engine: EngineCapabilities, *, label: str, output_root: Path,
                 cli_prefix: Sequence[str], python: str, engine_env: request_setup.EngineEnv, model_path: str | None,
                 bcg: bool, timeout_s: float, echo=None, extra_args: Sequence[str] = ()):
        self.preset, self.engine, self.label, self.bcg, self.engine_env = preset, engine, label, bcg, engine_env
        self.root = output_root / f"{preset.name}__{label}__bcg-replay"
        self.python, self.timeout_s, self.echo = python, timeout_s, echo
        self.markers = log_markers.markers_for_version(engine.version)
        self.requests = script(preset)
        self.cli_len = len(cli_prefix)
        self.configs = {}
        for name, with_bcg in (("eager", False), ("bcg", bcg)):
            options = command_builder.RunOptions(label=label, arm=name, breakable_cuda_graph=with_bcg,
                                                 extra_args=(*extra_args, *campaign_context.port_args_for(engine)))
            invocation = command_builder.build_invocation(
                preset, options, engine, sglang_cli=list(cli_prefix), output_root=self.root, assets_dir=Path("/"),
                caller_env=engine_env.caller_env, model_path=model_path)
            self.configs[name] = (invocation, with_bcg)

    def run(self) -> dict[str, Any]:
        if self.root.exists():
            raise contract.PreconditionError("run.label_taken", f"{self.root} exists already",
                                             "choose a new --label; replays are never overwritten")
        engines = {name: self._serve_all(name) for name in self.configs}
        pairs = []
        for request in self.requests:
            eager, bcg = engines["eager"]["requests"][request.id], engines["bcg"]["requests"][request.id]
            identical = bool(eager["sha256"]) and eager["sha256"] == bcg["sha256"]
            pairs.append({"id": request.id, "what": request.what, "identical": identical,
                          "eager_sha256": eager["sha256"], "bcg_sha256": bcg["sha256"]})
        problems = []
        for name, served in engines.items():
            problems += [f"{name}: {p}" for p in served["problems"]]
        bcg = engines["bcg"]
        problems += [f"{p['id']}: eager and BCG outputs differ" for p in pairs if not p["identical"]]
        for request in self.requests:
            row = bcg["requests"][request.id]
            if row["fell_back"] and request.captured_shape:
                problems.append(f"{request.id}: the BCG engine fell back to eager on a warmed resolution")
        if self.bcg and not bcg["captured_at_warmup"]:
            problems.append("bcg: no graph captured at warmup")
        return contract.envelope(SCHEMA, "bench_diffusion_denoise", ok=not problems, preset=self.preset.name,
                                 label=self.label, bcg=self.bcg, output_dir=str(self.root),
                                 requests=[dataclasses.asdict(r) for r in self.requests], engines=engines,
                                 pairs=pairs, problems=problems)

    def _serve_all(self, name: str) -> dict[str, Any]:
        invocation, with_bcg = self.configs[name]
        engine_dir = self.root / name
        prepared = request_setup.prepare(invocation, self.engine_env, self.markers, run_dir=engine_dir)
        args = list(prepared.argv[self.cli_len:])
        engine = warm_engine.WarmEngine(name, warm_engine.driver_argv(self.python, args), dict(prepared.env),
                                        engine_dir / "engine.log", cwd=engine_dir, echo=self.echo)
        capture_lines: list[str] = []
        startup = prepared.gate

        def watch(gate: log_gates.RequestLogGate):
            def on_line(line: str) -> str | None:
                if "[Diffusion BCG] captured" in line:
                    capture_lines.append(line)
                return gate.feed(line)
            return on_line

        print(f"[bcg-replay] starting the {name} engine", file=sys.stderr, flush=True)
        served: dict[str, Any] = {"engine": name, "bcg": with_bcg, "log_path": str(engine.log_path), "problems": [],
                                  "requests": {}}
        try:
            engine.start()
            ready = engine.wait_ready(watch(startup), self.timeout_s)
            verdict = startup.verdict()
            served["captured_at_warmup"] = verdict.bcg.captured_graphs
            served["captured_at_warmup_per_rank"] = ranks_in(capture_lines)
            if ready.status != "ok" or (verdict.reasons and not all(r.code == "bcg.no_capture" for r in
                                                                    verdict.reasons)):
                served["problems"].append(f"startup {ready.status}: " + "; ".join(verdict.reason_codes()))
            captures = verdict.bcg.captured_graphs
            for request in self.requests:
                out_dir = engine_dir / request.id
                out_dir.mkdir()
                gate = engine_args.log_gate(self.markers, invocation.argv, quality=invocation.quality_level,
                                            prior_captures=captures, require_native=False)
                before = len(capture_lines)
                segment = engine.serve(request.id, request_args(args, request, out_dir), watch(gate), self.timeout_s)
                (out_dir / "engine.log").write_text("".join(line + "\n" for line in segment.lines), encoding="utf-8")
                v = gate.verdict()
                outputs = sorted(p for p in out_dir.iterdir() if p.name.startswith(request.id + ".") and
                                 p.suffix != ".json" and p.name != "engine.log")
                served["requests"][request.id] = {
                    "status": segment.status, "wall_s": round(segment.wall_s, 3),
                    "recaptures": v.bcg.captured_graphs - captures,
                    "recaptures_per_rank": ranks_in(capture_lines[before:]),
                    "fell_back": bool(v.bcg.invalid_signals) or v.bcg.signature_misses > 0,
                    "fallback_lines": [ref.line for ref in v.bcg.invalid_signals][:5],
                    "sha256": fileio.sha256_file(outputs[0]) if outputs else None,
                    "output": str(outputs[0]) if outputs else None}
                captures = v.bcg.captured_graphs
                if segment.status != "ok" or not outputs:
                    served["problems"].append(f"{request.id}: {segment.status}, "
                                              f"{'no output' if not outputs else 'output saved'}")
        finally:
            engine.close()
        return served


def run_command(preset: Preset, engine: EngineCapabilities, *, label: str, bcg: bool, output_root: Path,
                model_path: str | None, timeout_s: float, build_local_model, echo: bool,
                extra_args: Sequence[str] = ()) -> dict[str, Any]:
    """--bcg-replay: both commands built first (a flag the engine lacks is refused before anything runs), then the
    model built if local, GPUs leased, and the replay run."""
    cli = [*engine_process.sglang_cli(), "generate"]

    def replay(visible: str | None, cpu: bool) -> Replay:
        engine_env = request_setup.EngineEnv.of(os.environ, use_cpu_adapter=cpu, cuda_visible_devices=visible)
        return Replay(preset, engine, label=label, output_root=output_root, cli_prefix=cli, python=sys.executable,
                      engine_env=engine_env, model_path=model_path, bcg=bcg, timeout_s=timeout_s,
                      echo=sys.stderr if echo else None, extra_args=extra_args)

    replay(None, False)
    if preset.local_model:
        build_local_model()
    inventory = gpu.read_inventory()
    if preset.num_gpus == 0:
        return replay(None, not inventory.gpus).run()
    request_setup.require_gpus(preset.name, preset.num_gpus, inventory, "run it on a GPU machine")
    with gpu.campaign_devices(preset.num_gpus, f"{preset.name}:{label}:replay", inventory) as (visible, _):
        return replay(visible, False).run()


def render_text(doc: dict[str, Any]) -> str:
    lines = [f"BCG replay {'OK' if doc['ok'] else 'NOT OK'} ({doc['preset']}, bcg={doc['bcg']})"]
    for pair in doc["pairs"]:
        row = doc["engines"]["bcg"]["requests"][pair["id"]]
        lines.append(f"  {pair['id']} {pair['what']}: identical={pair['identical']} recaptures={row['recaptures']} "
                     f"fell_back={row['fell_back']}")
    return "\n".join([*lines, *(f"  problem: {p}" for p in doc["problems"])])

