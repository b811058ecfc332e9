"""check_readiness: one schema-checked answer to "can preset X run here, now?", every check measured."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_main, run_script
from sgl_diffusion_bench import presets
from sgl_diffusion_bench.engine import fake_nvml, gpu
from sgl_diffusion_bench.campaign import readiness


@pytest.mark.torch
def test_the_cpu_preset_is_ready_here():
    run = run_script("check_readiness", "--model", "tiny-flux-cpu", "--json")
    doc = run.document
    assert run.returncode == 0 and doc["schema"] == "readiness.v1" and doc["ready"] and doc["reasons"] == []
    assert doc["checks"]["engine"]["ok"] and doc["checks"]["gpus"]["needed"] == 0
    assert doc["hub"]["checked"] is False  # a locally built model needs no hub


@pytest.mark.torch
def test_a_gpu_gated_preset_is_not_ready_here_with_every_reason(tmp_path):
    env = {"HF_TOKEN": "", "HF_HOME": str(tmp_path), "HF_ENDPOINT": "http://127.0.0.1:9"}  # nothing listens there
    start = time.monotonic()
    run = run_script("check_readiness", "--model", "flux", "--hub-timeout-s", "2", "--json", env=env)
    doc = run.document
    assert run.returncode == 3 and not doc["ok"] and not doc["ready"]
    failing = {r.split(":")[0] for r in doc["reasons"]}
    assert {"gpus", "model"} <= failing
    assert doc["checks"]["model"]["decision"] == "refused" and doc["token_present"] is False
    assert doc["hub"]["checked"] and doc["hub"]["reachable"] is False and doc["hub"]["error"]  # measured, not assumed
    assert time.monotonic() - start < 60


def test_an_answering_hub_is_reachable_even_with_an_error_status():
    import http.server
    import threading

    class Teapot(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 (http.server's naming)
            self.send_response(418)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Teapot)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hub = readiness.hub_reachability({"HF_ENDPOINT": f"http://127.0.0.1:{server.server_port}"}, 2.0)
    finally:
        server.shutdown()
    assert hub["reachable"] and hub["checked"] and hub["latency_ms"] is not None
    assert readiness.hub_reachability({"HF_HUB_OFFLINE": "1"})["checked"] is False


def test_a_hub_that_trickles_its_answer_is_cut_off_at_the_total_deadline():
    """A byte every 0.2 s keeps every socket read inside its timeout: only a total deadline ends the check."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
                if stop.wait(0.2):
                    return
                conn.sendall(bytes([byte]))

    threading.Thread(target=trickle, daemon=True).start()
    started = time.monotonic()
    try:
        hub = readiness.hub_reachability({"HF_ENDPOINT": f"http://127.0.0.1:{listener.getsockname()[1]}"}, 1.0)
    finally:
        stop.set()
        listener.close()
    assert time.monotonic() - started < 3
    assert hub["checked"] and not hub["reachable"] and "within 1 s" in hub["error"], hub


def test_gpus_must_be_idle_and_unleased():
    preset = presets.get_preset("flux")  # 2 GPUs
    nvml = fake_nvml.FakeNvml([fake_nvml.FakeDevice(uuid=f"GPU-{i}") for i in range(3)])
    inventory = gpu.read_inventory(nvml)
    assert readiness.gpu_check(preset, inventory, lambda uuid: None)["ok"]
    leased = readiness.gpu_check(preset, inventory, lambda uuid: {"pid": 1} if uuid != "GPU-0" else None)
    assert not leased["ok"] and leased["free"] == ["GPU-0"] and "GPU-1" in leased["reason"]


@pytest.mark.torch
def test_the_dry_run_of_a_preset_that_cannot_run_here_says_so():
    here = run_script("bench_diffusion_denoise", "--model", "wan-ti2v", "--dry-run", "--json")
    assert here.returncode == 3 and not here.document["ok"]
    refusal = here.document["refusals"][0]
    assert refusal["code"] == "gpu.none" and "check_readiness" in refusal["hint"]
    elsewhere = run_script("bench_diffusion_denoise", "--model", "wan-ti2v", "--dry-run", "--engine-capabilities",
                           "recent", "--json")
    assert elsewhere.returncode == 0 and elsewhere.document["ok"]  # a plan for another machine


@pytest.mark.parametrize("endpoint", ["http://[::1", "hf-mirror.example", "ftp://host", "https://"])
def test_a_malformed_hf_endpoint_is_a_clear_refusal_not_a_traceback(endpoint):
    """huggingface_hub raises while it imports when HF_ENDPOINT is no URL; every command checks it first."""
    from sgl_diffusion_bench import hf_settings

    assert hf_settings.endpoint_problem({"HF_ENDPOINT": endpoint})
    assert hf_settings.endpoint_problem({"HF_ENDPOINT": "https://hf-mirror.example/"}) is None
    assert hf_settings.endpoint_problem({}) is None
    run = run_main("check_readiness", "--model", "flux", "--engine-capabilities", "recent", "--json",
                     env={"HF_ENDPOINT": endpoint})
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.document["error"]["code"] == "config.bad_hf_endpoint"


_ENDPOINTS = st.builds(lambda scheme, host, port, path: f"{scheme}{host}{port}{path}",
                       st.sampled_from(["http://", "https://", "ftp://", "", "http:/"]),
                       st.one_of(st.sampled_from(["127.0.0.1", "[::1]", "[::1", "", " a", "a\x00b", "user:pw@127.0.0.1",
                                                  "a%00b", "\u00e9x"]), st.text(max_size=8)),
                       st.sampled_from(["", ":1", ":x", ":99999", ":0", ":-1"]),
                       st.one_of(st.sampled_from(["", "/", "/a b", "/?q=\r\n", "#frag"]), st.text(max_size=8)))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(endpoint=st.one_of(_ENDPOINTS, st.text(max_size=30)))
def test_any_hf_endpoint_is_refused_up_front_or_asked_within_the_deadline(endpoint):
    """Issue 44: HF_ENDPOINT of any text is either config.bad_hf_endpoint's reason (every command refuses it before
    anything runs) or one the hub check asks within its deadline and answers reachable or not, with the reason;
    'http://[::1]:x' and 'http://h/a b' reached urllib and ended in exit 70 before."""
    from sgl_diffusion_bench import hf_settings

    environ = {"HF_ENDPOINT": endpoint}
    problem = hf_settings.endpoint_problem(environ)
    if problem is not None or not endpoint:
        assert problem is None or "HF_ENDPOINT" in problem
        return
    started = time.monotonic()
    hub = readiness.hub_reachability(environ, 1.0)
    assert time.monotonic() - started < 5
    assert hub["checked"] and isinstance(hub["reachable"], bool) and (hub["reachable"] or hub["error"])


def test_an_input_image_the_bundle_ships_is_ready_in_an_empty_work_folder_and_a_hub_one_is_not(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFUSION_BENCH_WORKDIR", str(tmp_path))  # no assets there yet
    bundled = readiness.assets_check(presets.get_preset("tiny-flux2-edit-cpu"))
    assert bundled["ok"] and "installed from the bundle when a run starts" in bundled["reason"]
    assert not (tmp_path / "inputs").exists()  # a check installs nothing
    hub = readiness.assets_check(presets.get_preset("qwen-edit"))
    assert not hub["ok"] and "--fetch-assets" in hub["reason"]
