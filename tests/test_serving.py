"""bench_diffusion_serving against the real engine: two real `sglang serve` arms on the tiny CPU model (arm B with
dynamic batching, which really changes the server), two request rates and one concurrency, one shared run for the
report's assertions; no server outlives the CLI on success, failure, Ctrl-C or SIGKILL (during the servers'
start-up and during the load phase, where a Ctrl-C keeps the requests measured so far); bad input is refused before
any server starts."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SCRIPTS, assert_announced_and_summarised, run_main, run_script
from engine_release import DEFAULT_RELEASE, INSTALLED, expects
from sgl_diffusion_bench import contract, work_dirs
from sgl_diffusion_bench.engine import engine_process, tiny_model
from sgl_diffusion_bench.serving import metrics
from sgl_diffusion_bench.engine.warm_engine import process_group_members

SAMPLE_MANIFEST = SCRIPTS / "sgl_diffusion_bench" / "data" / "sample_requests.jsonl"
LOAD = ["--model", "tiny-flux-cpu", "--arm-b-args=--batching-max-size 2"]
# Arm B turns on dynamic batching, a server flag 0.5.10.post1 lacks (refused there as engine.flag_missing), and the
# video test sends a request manifest, which 0.5.10.post1 cannot parse: those tests are for 0.5.23.
ON_0523_ONLY = expects(DEFAULT_RELEASE)


def _gone(pgid: int, within_s: float = 20.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not engine_process.group_alive(pgid):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def serving_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("serving") / "run"
    run = run_script("bench_diffusion_serving", *LOAD, "--request-rate", "2,8", "--concurrency", "2",
                     "--requests", "3", "--requests-file", str(SAMPLE_MANIFEST), "--slo-ms", "60000",
                     "--output-dir", str(out), "--json", timeout=900)
    return run, out


@pytest.mark.engine
@pytest.mark.torch
@ON_0523_ONLY
def test_serving_ab_report_from_real_requests(serving_run):
    run, out = serving_run
    assert run.returncode == 0, run.stderr[-3000:]
    doc = run.document  # validated against serving-report.v1 by run_script
    last = assert_announced_and_summarised(run.stderr, "bench_diffusion_serving")[-1]
    assert last == (f"[bench_diffusion_serving] valid: verdict {doc['verdict']}; 3 load point(s); "
                    f"Markdown {doc['markdown']}")
    assert doc["schema"] == "serving-report.v1" and doc["status"] == "valid"
    assert doc["requests_source"]["kind"] == "manifest" and doc["requests_source"]["requests"] == 6
    assert [s["request_id"] for s in doc["request_specs"]][:3] == ["square-64", "wide-128x64", "tall-64x128"]
    assert [(p["load"]["kind"], p["load"]["value"]) for p in doc["load_points"]] == [
        ("request_rate", 2.0), ("request_rate", 8.0), ("concurrency", 2.0)]
    for point in doc["load_points"]:
        assert [b["position"] for b in point["blocks"]] == ["A1", "B1", "B2", "A2"]
        for block in point["blocks"]:
            assert len(block["requests"]) == 3 and all(r["success"] for r in block["requests"])
            assert all(r["output_sha256"] and r["inference_time_s"] > 0 for r in block["requests"])
            if point["load"]["kind"] == "request_rate":  # the same seeded trace in every block of both arms
                assert [r["scheduled_s"] for r in block["requests"]] == pytest.approx(point["load"]["arrivals_s"])
        for arm in ("A", "B"):  # the percentiles are those of the requests the document lists
            latencies = [r["latency"] for b in point["blocks"] if b["arm"] == arm for r in b["requests"]]
            figures = point["arms"][arm]
            assert figures["completed_requests"] == 6 and figures["failed_requests"] == 0
            assert figures["latency_p50"] == pytest.approx(metrics.percentile(latencies, 50))
            assert figures["latency_p99"] == pytest.approx(metrics.percentile(latencies, 99))
            assert min(latencies) <= figures["latency_p50"] <= figures["latency_p99"] <= max(latencies)
            assert figures["slo_attainment_rate"] == 1.0 and figures["goodput_qps"] > 0
        assert set(point["comparison"]) == {"latency_p50", "latency_p99", "throughput_qps"}
        # the manifest's first three requests, one shape each, each judged on its own
        assert [r["shape"] for r in point["shapes"]] == ["128x64@2steps", "64x128@2steps", "64x64@2steps"]
        assert all(r["requests"] == 4 and r["baseline_p50_ms"] > 0 for r in point["shapes"])
        assert point["output_identity"]["compared_requests"] == 3
        for change in point["comparison"].values():  # one round: no verdict, but the noise floor is stated
            assert change["verdict"] == "insufficient_data"
            assert change["noise_floor"]["min_detectable_effect_pct"] is not None
    a_log = Path(doc["arms"]["A"]["log"]).read_text()
    b_log = Path(doc["arms"]["B"]["log"]).read_text()
    assert "Batch admission enabled: user_max=2" in b_log and "Batch admission enabled" not in a_log
    for arm in ("A", "B"):
        assert doc["arms"][arm]["gates"]["valid"] and doc["arms"][arm]["gates"]["native_evidence"]
        assert _gone(doc["arms"][arm]["pgid"], 1.0), f"arm {arm}'s server outlived a successful run"
    assert (out / "report.md").read_text().startswith("# Serving A/B")
    assert (out / "latency_vs_rate.png").stat().st_size > 1000
    assert json.loads((out / "report.json").read_text())["load_points"] == doc["load_points"]


STARTED = re.compile(r"server [AB]: started \(port (\d+), process group (\d+)")


_SPAWNED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_cli_left_running():
    """A failed test must not leave its CLI, and so its two servers, running through the rest of the lane."""
    yield
    while _SPAWNED:
        proc = _SPAWNED.pop()
        if proc.poll() is None:
            proc.kill()  # its watchdog takes the servers with it
            proc.wait(timeout=30)


def _spawn_cli(tmp_path: Path, *load_args: str) -> tuple[subprocess.Popen, list[str]]:
    """The CLI in the background with its stderr lines collected as they come."""
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "bench_diffusion_serving.py"), *LOAD, *load_args,
                             "--output-dir", str(tmp_path / "run"), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _SPAWNED.append(proc)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    return proc, lines


def _started(lines: list[str]) -> list[tuple[int, int]]:
    """(port, process group) of each server the CLI said it started."""
    return [(int(m[1]), int(m[2])) for m in map(STARTED.search, list(lines)) if m]


def _start_cli(tmp_path: Path, *, schedulers: bool) -> tuple[subprocess.Popen, list[int]]:
    """The CLI under a long closed loop; returns once both servers' process groups exist (with ``schedulers``:
    once each also holds the scheduler process its serve process spawns), with the groups' ids."""
    proc, lines = _spawn_cli(tmp_path, "--concurrency", "1", "--duration-s", "600")
    deadline = time.monotonic() + 600
    while True:
        pgids = [pgid for _, pgid in _started(lines)]
        if len(pgids) == 2 and all(len(process_group_members(p)) >= (2 if schedulers else 1) for p in pgids):
            return proc, pgids
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines[-20:])
        time.sleep(0.2)


def _in_load_phase(tmp_path: Path) -> tuple[subprocess.Popen, list[tuple[int, int]], Path]:
    """The CLI in its load phase: the first block's progress line printed and at least one measured request on
    disk (a block of 200 requests at 4/s lasts ~50 s, far longer than the test waits). Returns the CLI, the
    servers' (port, process group) and the per-request log."""
    proc, lines = _spawn_cli(tmp_path, "--request-rate", "4", "--requests", "200", "--warmup-requests", "1")
    requests_log = tmp_path / "run" / "requests.jsonl"
    deadline = time.monotonic() + 600
    while True:
        in_block = any("block 1/4 (A1) ..." in line for line in list(lines))
        if in_block and requests_log.is_file() and requests_log.read_text().count("\n") >= 1:
            servers = _started(lines)
            assert len(servers) == 2 and all(_listening(port) for port, _ in servers)
            return proc, servers, requests_log
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines[-20:])
        time.sleep(0.1)


def _listening(port: int) -> bool:
    """Whether any TCP socket of this machine listens on ``port`` (the kernel's table, IPv4 and IPv6)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                return True
    return False


def _nothing_left(servers: list[tuple[int, int]], within_s: float = 20.0) -> list[str]:
    """What is left of the servers after ``within_s``: process groups with a live member, ports still listening."""
    deadline = time.monotonic() + within_s
    while True:
        left = [f"process group {g}" for _, g in servers if engine_process.group_alive(g)]
        left += [f"a listener on port {p}" for p, _ in servers if _listening(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


@pytest.mark.engine
@pytest.mark.torch
@ON_0523_ONLY
def test_ctrl_c_stops_both_servers(tmp_path):
    proc, pgids = _start_cli(tmp_path, schedulers=False)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert json.loads(stdout)["error"]["code"] == "run.interrupted"
    assert not any(engine_process.group_alive(p) for p in pgids), "a server outlived Ctrl-C"


@pytest.mark.engine
@pytest.mark.torch
@ON_0523_ONLY
def test_killed_client_takes_its_servers_with_it(tmp_path):
    proc, pgids = _start_cli(tmp_path, schedulers=True)  # the scheduler is no child of ours: the watchdog's part
    proc.kill()
    proc.wait(timeout=30)
    assert all(_gone(p) for p in pgids), "a server outlived its SIGKILLed client"


@pytest.mark.engine
@pytest.mark.torch
@ON_0523_ONLY
def test_ctrl_c_during_the_load_phase_stops_both_servers_and_keeps_the_measured_requests(tmp_path):
    proc, servers, requests_log = _in_load_phase(tmp_path)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=90)
    assert proc.returncode == 130
    doc = json.loads(stdout)
    assert doc["schema"] == "error.v1" and contract.validation_errors(doc) == []
    error = doc["error"]
    assert error["code"] == "run.interrupted" and str(requests_log) in error["message"]
    assert _nothing_left(servers) == [], "a server outlived Ctrl-C in the load phase"
    kept = [json.loads(line) for line in requests_log.read_text().splitlines()]
    assert error["details"]["requests_log"] == str(requests_log) and error["details"]["completed_requests"] == len(kept)
    assert 1 <= len(kept) < 200  # what was measured before the signal, no more
    for row in kept:  # the first block: arm A's, each request with its figures
        assert (row["load_point"], row["arm"], row["position"]) == ("rate 4/s", "A", "A1")
        assert row["success"] and row["latency"] > 0 and row["output_sha256"]


@pytest.mark.engine
@pytest.mark.torch
@ON_0523_ONLY
def test_killed_client_during_the_load_phase_takes_its_servers_with_it(tmp_path):
    proc, servers, _ = _in_load_phase(tmp_path)
    proc.kill()
    proc.wait(timeout=30)
    assert _nothing_left(servers) == [], "a server outlived its SIGKILLed client in the load phase"


@pytest.mark.engine
@pytest.mark.torch
@ON_0523_ONLY
def test_server_never_healthy_is_an_error(tmp_path):
    run = run_script("bench_diffusion_serving", *LOAD, "--request-rate", "1", "--startup-timeout-s", "3",
                     "--output-dir", str(tmp_path / "run"), "--json", timeout=120)
    assert run.returncode == 1
    error = run.document["error"]
    assert error["code"] == "serving.server_unhealthy" and "within 3 s" in error["message"]
    assert isinstance(error["details"]["log_tail"], list) and error["details"]["log"].endswith("server.log")
    assert not engine_process.group_alive(error["details"]["pgid"])


@pytest.mark.engine
@pytest.mark.torch
@ON_0523_ONLY
def test_server_that_exits_is_an_error_with_its_log_tail(tmp_path):
    run = run_script("bench_diffusion_serving", "--model", "tiny-flux-cpu", "--arm-a-args=--batching-max-size 0",
                     "--request-rate", "1", "--output-dir", str(tmp_path / "run"), "--json", timeout=300)
    assert run.returncode == 1
    error = run.document["error"]
    assert error["code"] == "serving.server_exited" and error["details"]["arm"] == "A"
    assert any("batching_max_size must be >= 1" in line for line in error["details"]["log_tail"])
    assert "batching_max_size must be >= 1" in error["message"]


@pytest.mark.torch
@pytest.mark.parametrize("below", [0, 1], ids=["its-port", "its-broker-port"])
def test_port_in_use_is_refused_before_anything_starts(tmp_path, below):
    """`sglang serve --port P` also binds P + 1 (its broker): a listener on either refuses --port-b P."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", engine_process.free_port(3) + 1))
        busy.listen()
        port = busy.getsockname()[1] - below
        run = run_script("bench_diffusion_serving", *LOAD, "--request-rate", "1", "--port-b", str(port),
                         "--output-dir", str(tmp_path / "run"), "--json")
    assert run.returncode == 3
    message = run.document["error"]["message"]
    assert run.document["error"]["code"] == "serving.port_in_use" and message.startswith(f"--port-b {port}: ")
    assert ("broker" in message) == bool(below) and f":{port + below} " in message
    assert not (tmp_path / "run").exists()


def test_adjacent_ports_are_refused_since_each_server_binds_the_next_one_too(tmp_path):
    port = engine_process.free_port(3)
    run = run_script("bench_diffusion_serving", *LOAD, "--request-rate", "1", "--port-a", str(port),
                     "--port-b", str(port + 1), "--output-dir", str(tmp_path / "run"), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.rejected_combination"
    assert "adjacent" in run.document["error"]["message"] and not (tmp_path / "run").exists()


@pytest.mark.torch
def test_an_arm_flag_the_engine_lacks_is_refused_before_anything_starts(tmp_path):
    run = run_script("bench_diffusion_serving", "--model", "tiny-flux-cpu", "--arm-b-args=--no-such-server-flag 1",
                     "--request-rate", "1", "--output-dir", str(tmp_path / "run"), "--json")
    assert run.returncode == 3
    error = run.document["error"]
    assert error["code"] == "engine.flag_missing" and error["details"]["missing_flags"] == ["--no-such-server-flag"]
    assert "--arm-b-args" in error["message"] and not (tmp_path / "run").exists()


@pytest.mark.torch
@pytest.mark.parametrize("line, says", [
    ('{"prompt": "a cat", "colour": "red"}', "unsupported field(s): colour"),
    ('{"prompt": "a cat", "width": 60, "height": 64}', "not a multiple of 8"),
])
def test_manifest_line_the_engine_rejects_is_named(tmp_path, line, says):
    manifest = tmp_path / "requests.jsonl"
    manifest.write_text(SAMPLE_MANIFEST.read_text().splitlines()[0] + "\n" + line + "\n")
    run = run_script("bench_diffusion_serving", *LOAD, "--request-rate", "1", "--requests-file", str(manifest),
                     "--output-dir", str(tmp_path / "run"), "--json")
    assert run.returncode == 2
    error = run.document["error"]
    assert error["code"] == "input.bad_manifest" and error["details"]["line"] == 2
    assert "line 2" in error["message"] and says in error["message"]
    assert not (tmp_path / "run").exists()


@pytest.mark.torch
def test_sample_manifest_is_read_by_the_engines_parser():
    from sgl_diffusion_bench.engine import request_manifest
    from sgl_diffusion_bench.serving import requests
    package_dir = Path(work_dirs.sglang_location()["package_dir"])
    specs, sha = request_manifest.load_manifest(SAMPLE_MANIFEST, package_dir, (64, 64))
    assert len(specs) == 6 and len(requests.shapes(specs)) >= 5 and len(sha) == 64
    assert specs[5].sampling["guidance_scale"] == 3.5 and specs[5].payload()["num_inference_steps"] == 3


VIDEO_MANIFEST = [  # two shapes and two frame counts of the tiny Wan
    {"request_id": "video-64-5f", "prompt": "a cat walking", "width": 64, "height": 64, "num_frames": 5,
     "num_inference_steps": 2, "seed": 42},
    {"request_id": "video-64x32-9f", "prompt": "a boat at sea", "width": 64, "height": 32, "num_frames": 9,
     "num_inference_steps": 2, "seed": 7}]
I2V_MANIFEST = [  # two sizes of the tiny Wan I2V's video of the bundled image
    {"request_id": "i2v-64", "prompt": "the disc drifts to the right", "width": 64, "height": 64, "num_frames": 5,
     "num_inference_steps": 2, "seed": 42},
    {"request_id": "i2v-64x32", "prompt": "the disc drifts up", "width": 64, "height": 32, "num_frames": 5,
     "num_inference_steps": 2, "seed": 7}]
EDIT_MANIFEST = [  # two sizes of the tiny FLUX.2 Klein's edit of the bundled image
    {"request_id": "edit-64", "prompt": "make the disc red", "width": 64, "height": 64, "num_inference_steps": 2,
     "seed": 42},
    {"request_id": "edit-96x64", "prompt": "make the disc blue", "width": 96, "height": 64, "num_inference_steps": 2,
     "seed": 7}]


@pytest.mark.engine
@pytest.mark.torch
@ON_0523_ONLY
def test_a_video_preset_is_served_as_video_jobs_of_mixed_shapes(tmp_path):
    manifest = tmp_path / "video.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in VIDEO_MANIFEST))
    run = run_script("bench_diffusion_serving", "--model", "tiny-wan-t2v-cpu", "--arm-b-args=--log-level=info",
                     "--request-rate", "2", "--requests", "2", "--requests-file", str(manifest), "--output-dir",
                     str(tmp_path / "out"), "--json", timeout=900)
    doc = run.document
    assert run.returncode == 0 and doc["status"] == "valid", run.stderr[-3000:]
    assert doc["settings"]["endpoint"] == "/v1/videos" and doc["outputs_identical"]
    (point,) = doc["load_points"]
    assert [s["shape"] for s in point["shapes"]] == ["64x32x9f@2steps", "64x64x5f@2steps"]
    for block in point["blocks"]:
        ids = [r["request_id"] for r in block["requests"]]
        assert ids == ["video-64-5f", "video-64x32-9f"] and all(r["success"] for r in block["requests"])
        # the client's latency covers the server's own inference time and at most one poll more
        assert all(r["inference_time_s"] < r["latency"] and r["output_sha256"] for r in block["requests"])
    hashes = {r["request_id"]: r["output_sha256"] for b in point["blocks"] for r in b["requests"]}
    assert len(set(hashes.values())) == 2  # two different videos, each the same in all four blocks
    for arm in ("a", "b"):
        log = (tmp_path / "out" / f"server-{arm}" / "server.log").read_text()
        assert "server warmup req (64x64x5f" in log  # the preset's own shape, not the model's 832x480x17f
    assert "polled every 50 ms" in (tmp_path / "out" / "report.md").read_text()


def test_a_preset_whose_requests_are_not_images_edits_or_videos_is_refused_before_anything_starts():
    run = run_main("bench_diffusion_serving", "--model", "hunyuan3d-shape", "--request-rate", "1", "--json")
    error = run.document["error"]
    assert run.returncode == 2 and error["code"] == "serving.task_unsupported"
    assert "3d preset" in error["message"] and "bench_diffusion_denoise" in error["hint"]


@pytest.mark.engine
@pytest.mark.torch
@pytest.mark.parametrize("preset, endpoint, lines, shapes", [
    ("tiny-flux2-edit-cpu", "/v1/images/edits", EDIT_MANIFEST, ["64x64@2steps", "96x64@2steps"]),
    ("tiny-wan-i2v-cpu", "/v1/videos", I2V_MANIFEST, ["64x32x5f@2steps", "64x64x5f@2steps"])], ids=["edit", "i2v"])
def test_a_preset_with_an_input_image_uploads_it_with_every_request(tmp_path, preset, endpoint, lines, shapes):
    # two sizes from a request manifest; 0.5.10.post1 ships no manifest parser: the preset's one request there
    manifest = tmp_path / "requests.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    given = ["--requests-file", str(manifest)] if INSTALLED == DEFAULT_RELEASE else []
    shapes = shapes if given else [s for s in shapes if s.startswith("64x64")]  # the preset's own size
    # an empty work folder: the bundled image is installed by the run, then uploaded (an edit's image, a video job's
    # input_reference)
    env = {"DIFFUSION_BENCH_WORKDIR": str(tmp_path / "work"), tiny_model.CACHE_ENV: str(tiny_model.default_cache_dir())}
    run = run_script("bench_diffusion_serving", "--model", preset, "--concurrency", "1", "--requests", "2", *given,
                     "--output-dir", str(tmp_path / "out"), "--json", timeout=900, env=env)
    doc = run.document
    assert run.returncode == 0 and doc["status"] == "valid", run.stderr[-3000:]
    image = tmp_path / "work" / "inputs" / "diffusion_benchmark" / "figs" / "tiny_input_64.png"
    assert doc["settings"]["endpoint"] == endpoint and doc["settings"]["input_image"] == str(image)
    (point,) = doc["load_points"]
    assert [s["shape"] for s in point["shapes"]] == shapes
    requests = [r for b in point["blocks"] for r in b["requests"]]
    assert all(r["success"] and r["output_sha256"] for r in requests) and doc["outputs_identical"]
    assert len({r["output_sha256"] for r in requests}) == len(shapes)  # one output per size, the same in every block
    for arm in ("A", "B"):  # the engine read the uploaded copy of the image for every request, warm-ups included
        log = (tmp_path / "out" / f"server-{arm.lower()}" / "server.log").read_text()
        uploads = re.findall(r"image_path: \S*inputs/uploads/\S+_tiny_input_64\.png", log)
        sent = sum(len(b["requests"]) for b in point["blocks"] if b["arm"] == arm)
        assert len(uploads) == sent + len(shapes), log[-3000:]  # a warm-up of each shape


def test_a_video_request_carries_its_frames_in_its_shape_and_its_job_body():
    from sgl_diffusion_bench.engine.request_manifest import RequestSpec
    spec = RequestSpec("v", "a cat", 64, 32, {"num_frames": 9, "fps": 8, "seed": 7, "num_inference_steps": 2})
    assert spec.shape == "64x32x9f@2steps"
    assert spec.video_payload() == {"model": "default", "prompt": "a cat", "size": "64x32", "num_outputs_per_prompt": 1,
                                    "num_frames": 9, "fps": 8, "seed": 7, "num_inference_steps": 2}


@contextlib.contextmanager
def _http_server(routes: list):
    """A real HTTP server (aiohttp) serving ``routes`` on its own event loop, in a thread (the client is the
    product's, in this one); its base URL."""
    from aiohttp import web

    port, ready, stop = engine_process.free_port(), threading.Event(), threading.Event()

    def serve() -> None:
        async def main():
            app = web.Application()
            app.add_routes(routes)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.02)
            await runner.cleanup()
        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(10)


def test_a_video_job_that_fails_or_never_gets_an_id_is_a_failed_request_naming_why():
    """A server answering as sglang's video API does when a job fails."""
    from aiohttp import web
    from sgl_diffusion_bench.engine.request_manifest import RequestSpec
    from sgl_diffusion_bench.serving import load

    polls = []

    async def create(request):
        body = await request.json()
        return web.json_response({"id": "job-1"} if body["prompt"] == "fails" else {})

    async def status(request):
        polls.append(request.match_info["job"])
        return web.json_response({"status": "failed", "error": {"message": "out of memory"}} if len(polls) > 1
                                 else {"status": "processing"})

    specs = [RequestSpec(name, name, 64, 64, {"num_frames": 5}) for name in ("fails", "no-id")]
    with _http_server([web.post("/v1/videos", create), web.get("/v1/videos/{job}", status)]) as url:
        (failed, no_id), _ = load.run_trace(url, load.Trace(load.LoadPoint("concurrency", 1), (0, 1), None, 0), specs,
                                            endpoint=load.VIDEOS)
    assert not failed.success and "job failed" in failed.error and "out of memory" in failed.error
    assert polls == ["job-1", "job-1"] and failed.latency >= load.VIDEO_POLL_S  # polled until it failed
    assert not no_id.success and no_id.error == "HTTP 200 without a job id" and no_id.output_sha256 is None


@pytest.mark.parametrize("rate", ["0", "-1", "2,0", "inf", "nan"])
def test_rate_zero_or_negative_is_a_usage_error(rate):
    run = run_main("bench_diffusion_serving", *LOAD, f"--request-rate={rate}", "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.invalid_arguments"
    assert "request rate" in run.document["error"]["message"] or "not a number" in run.document["error"]["message"]


def test_trace_is_seeded_and_poisson():
    from sgl_diffusion_bench.serving import load
    point = load.LoadPoint("request_rate", 4.0)
    first = load.build_trace(point, 3, requests=400, duration_s=None, seed=1)
    assert first == load.build_trace(point, 3, requests=400, duration_s=None, seed=1)
    assert first.arrivals_s != load.build_trace(point, 3, requests=400, duration_s=None, seed=2).arrivals_s
    gaps = [b - a for a, b in zip(first.arrivals_s, first.arrivals_s[1:], strict=False)]
    assert 0.2 < sum(gaps) / len(gaps) < 0.3 and first.indices[:4] == (0, 1, 2, 0)
    timed = load.build_trace(point, 1, requests=None, duration_s=5.0, seed=1)
    assert timed.arrivals_s[-1] <= 5.0 and 8 <= len(timed.arrivals_s) <= 40
    closed = load.build_trace(load.LoadPoint("concurrency", 2), 3, requests=None, duration_s=5.0, seed=1)
    assert closed.indices is None and closed.arrivals_s is None and closed.to_json()["planned_requests"] is None


def _blocks(rounds: int, a_s: float, b_s: float, shapes=("64x64@2steps",)):
    """Blocks of 4 requests whose latencies are ``a_s``/``b_s`` (jittered), per A1 B1 B2 A2 round."""
    from sgl_diffusion_bench.serving import load, verdict
    out = []
    for n, (arm, round_no, position) in enumerate(verdict.block_plan(rounds)):
        base = a_s if arm == "A" else b_s
        results = [load.RequestResult(i, f"r{i}", shapes[i % len(shapes)], None, 0.0,
                                      base * (1 + 0.01 * ((n + i) % 3)), True, output_count=1) for i in range(4)]
        duration = sum(r.latency for r in results)
        out.append({"arm": arm, "round": round_no, "position": position, "duration": duration,
                    "metrics": metrics.block_metrics(results, duration, None), "requests": results})
    return out


def test_verdict_over_blocks_reads_throughput_the_right_way_round():
    from sgl_diffusion_bench.serving import verdict
    settings = dict(threshold_pct=1.5, resamples=2000, seed=1, confidence=0.95, min_rounds=2)
    faster = verdict.compare(_blocks(2, 1.0, 0.5), **settings)
    assert faster["latency_p50"]["verdict"] == "improved" and faster["latency_p99"]["verdict"] == "improved"
    assert faster["throughput_qps"]["verdict"] == "improved" and faster["throughput_qps"]["change_pct"] > 90
    assert faster["latency_p50"]["ci_high_pct"] < -40
    slower = verdict.compare(_blocks(2, 0.5, 1.0), **settings)
    assert {m["verdict"] for m in slower.values()} == {"regressed"}
    one_round = verdict.compare(_blocks(1, 1.0, 0.5), **settings)
    assert {m["verdict"] for m in one_round.values()} == {"insufficient_data"}
    assert one_round["latency_p50"]["noise_floor"]["min_detectable_effect_pct"] is not None
    assert verdict.overall([faster]) == "improved" and verdict.overall([faster, slower]) == "regressed"
    rows = verdict.shape_changes(_blocks(2, 1.0, 0.5, ("64x64@2steps", "128x64@2steps")), **settings)
    assert [r["shape"] for r in rows] == ["128x64@2steps", "64x64@2steps"]
    assert all(r["verdict"] == "improved" and r["requests"] == 16 for r in rows)


def test_block_figures_follow_bench_serving():
    from sgl_diffusion_bench.serving import load
    results = [load.RequestResult(i, "r", "s", None, 0.0, lat, ok, output_count=1 if ok else 0)
               for i, (lat, ok) in enumerate([(0.1, True), (0.2, True), (0.3, True), (0.4, True), (9.0, False)])]
    figures = metrics.block_metrics(results, 2.0, slo_ms=250)
    assert figures["completed_requests"] == 4 and figures["failed_requests"] == 1
    assert figures["throughput_qps"] == 2.0 and figures["latency_p50"] == pytest.approx(0.25)
    assert figures["latency_p99"] == pytest.approx(0.397) and figures["latency_mean"] == pytest.approx(0.25)
    assert figures["slo_met_success"] == 2 and figures["slo_attainment_rate"] == 0.4 and figures["goodput_qps"] == 1.0


def test_an_edit_is_a_multipart_form_of_the_image_requests_fields_and_the_input_image(tmp_path):
    """A server answering as sglang's /v1/images/edits does: what it receives is the image request's fields, each as
    a form field, and the input image as the file ``image``."""
    from aiohttp import web
    from sgl_diffusion_bench.engine.request_manifest import RequestSpec
    from sgl_diffusion_bench.serving import load

    received = {}

    async def edits(request):
        form = await request.post()
        received.update({k: (v.filename, v.file.read()) if hasattr(v, "file") else v for k, v in form.items()})
        return web.json_response({"data": [{"b64_json": base64.b64encode(b"edited").decode()}]})

    image = tmp_path / "input.png"
    image.write_bytes(b"\x89PNG not really")
    spec = RequestSpec("edit-1", "make the disc red", 64, 32, {"seed": 7, "num_inference_steps": 2})
    with _http_server([web.post("/v1/images/edits", edits)]) as url:
        (result,), _ = load.run_trace(url, load.Trace(load.LoadPoint("concurrency", 1), (0,), None, 0), [spec],
                                      endpoint=load.EDITS, image=image)
    assert result.success and result.output_sha256 == hashlib.sha256(b"edited").hexdigest()
    assert received.pop("image") == ("input.png", b"\x89PNG not really")
    assert received == {k: str(v) for k, v in spec.payload().items()}
    assert received["size"] == "64x32" and received["response_format"] == "b64_json" and received["seed"] == "7"
