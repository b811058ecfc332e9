"""run_engine against small real subprocesses (stop on a line, timeout, Ctrl-C, group kill), the CPU adapter's
switches and hook mechanism, and the helpers that build an engine command. No sglang engine runs here."""

from __future__ import annotations

import importlib.util
import io
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import HF_TOKEN_CANARY
from sgl_diffusion_bench import contract
from sgl_diffusion_bench.engine import engine_process
from sgl_diffusion_bench.engine import adapter_record
from sgl_diffusion_bench.engine.inside.cpu_adapter import sgl_cpu_adapter

PY = sys.executable


def script(code: str) -> list[str]:
    return [PY, "-u", "-c", textwrap.dedent(code)]


def pid_gone(pid: int, within_s: float = 3.0) -> bool:
    """True once ``pid`` no longer exists (or is a zombie awaiting its reaper)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_run_to_completion_logs_every_line_and_echoes(tmp_path):
    echo = io.StringIO()
    seen: list[str] = []
    run = engine_process.run_engine(script("""
        import sys
        print("first"); print("to stderr", file=sys.stderr); print("last"); sys.exit(3)
    """), dict(os.environ), tmp_path / "sub" / "log.txt", on_line=lambda line: seen.append(line), echo=echo)
    assert run.returncode == 3 and run.stop_reason is None and run.stop_line is None and run.stopped_after_s is None
    assert not run.interrupted and run.log_path == tmp_path / "sub" / "log.txt"
    assert run.log_path.read_text().splitlines() == ["first", "to stderr", "last"]
    assert seen == ["first", "to stderr", "last"] and echo.getvalue().splitlines() == seen


def test_on_started_runs_once_with_the_pid_while_the_process_runs(tmp_path):
    """The caller's own work (the report validator) overlaps the engine: the child waits for what on_started does."""
    flag, pids = tmp_path / "started", []

    def started(pid: int) -> None:
        pids.append(pid)
        flag.touch()
    run = engine_process.run_engine(script(f"""
        import os, pathlib, sys, time
        deadline = time.monotonic() + 20
        while not pathlib.Path({str(flag)!r}).exists():
            if time.monotonic() > deadline:
                sys.exit("on_started never ran")
            time.sleep(0.01)
        print(os.getpid(), os.getpgid(0))
    """), dict(os.environ), tmp_path / "log.txt", on_started=started)
    assert run.returncode == 0 and run.log_path.read_text().split() == [str(pids[0])] * 2 and len(pids) == 1


def test_stop_on_line_stops_at_once_and_keeps_later_lines(tmp_path):
    run = engine_process.run_engine(script("""
        import signal, sys, time
        def bye(*_):
            print("got SIGTERM"); sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("loading"); print("Falling back to diffusers backend"); time.sleep(60); print("never")
    """), dict(os.environ), tmp_path / "log.txt",
        on_line=lambda line: "diffusers-fallback" if "Falling back" in line else None)
    assert run.stop_reason == "diffusers-fallback" and run.stop_line == "Falling back to diffusers backend"
    assert run.stopped_after_s is not None and run.stopped_after_s < 10 and run.wall_s < run.stopped_after_s + 5
    log = run.log_path.read_text()
    assert "got SIGTERM" in log and "never" not in log
    assert "[run_engine] stopped after" in log and "diffusers-fallback" in log.splitlines()[-1]


def test_timeout_stops_a_silent_process(tmp_path):
    run = engine_process.run_engine(script("import time; print('start'); time.sleep(60)"), dict(os.environ),
                                    tmp_path / "log.txt", timeout_s=1.0)
    assert run.stop_reason == engine_process.TIMEOUT_REASON and run.stop_line is None
    # Stopped by the timeout, well before the 60 s sleep ends; how late past 1 s depends on the host's load.
    assert 0.9 <= run.stopped_after_s < 30 and run.returncode == -signal.SIGTERM and run.wall_s < 40


def test_stop_kills_grandchildren_and_sigterm_ignorers(tmp_path, monkeypatch):
    """The engine spawns workers: stopping must take the whole process group, even parts that ignore SIGTERM."""
    monkeypatch.setattr(engine_process, "STOP_GRACE_S", 0.5)
    pid_file = tmp_path / "grandchild.pid"
    run = engine_process.run_engine(script(f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("worker started"); time.sleep(60)
    """), dict(os.environ), tmp_path / "log.txt", on_line=lambda line: "stop" if "worker started" in line else None)
    assert run.returncode == -signal.SIGKILL and run.stop_reason == "stop"
    assert pid_gone(int(pid_file.read_text())), "the grandchild survived the stop"


def test_ctrl_c_stops_the_group_closes_the_log_and_reraises(tmp_path):
    def interrupt(line: str) -> None:
        if line == "ready":
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt) as caught:
        engine_process.run_engine(script("import time; print('ready'); time.sleep(60)"), dict(os.environ),
                                  tmp_path / "log.txt", on_line=interrupt)
    run = caught.value.engine_run
    assert run.interrupted and run.stop_reason == "interrupted" and run.returncode == -signal.SIGTERM
    assert run.log_path.read_text().splitlines() == ["ready", "[run_engine] interrupted (Ctrl-C): engine process "
                                                     "group stopped"]


def test_secret_values_are_redacted_in_the_log(tmp_path):
    env = {**os.environ, "HF_TOKEN": HF_TOKEN_CANARY}
    run = engine_process.run_engine(script("import os; print('token=' + os.environ['HF_TOKEN'])"), env,
                                    tmp_path / "log.txt")
    log = run.log_path.read_text()
    assert HF_TOKEN_CANARY not in log and log.startswith("token=")


def test_sglang_cli_and_ports():
    cli = engine_process.sglang_cli()
    assert Path(cli[0]).is_file() and os.access(cli[0], os.X_OK)
    args = engine_process.port_args(avoid={30005})
    assert args[0::2] == ["--master-port", "--scheduler-port"] and args[1] != args[3]
    for port in map(int, args[1::2]):
        assert engine_process.PORT_PICK_LOW <= port < 32768 and port != 30005  # never where the OS hands ports out
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # still free


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_free_port_block_skips_a_listener_and_what_it_must_avoid():
    """A server's port and the broker after it: the only block left free in the range is the one returned."""
    low = engine_process.PORT_PICK_LOW
    window = next(p for p in range(low + 500, 30000, 7) if all(map(bindable, range(p, p + 4))))
    outside = set(range(low, 40000)) - set(range(window, window + 4))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", window + 1))
        busy.listen()
        assert engine_process.free_port(2, avoid=outside) == window + 2
        with pytest.raises(contract.PreconditionError) as refused:
            engine_process.free_port(2, avoid=outside | {window + 2})
    assert refused.value.code == "engine.no_free_port"


def test_cpu_adapter_env_puts_the_adapter_first_and_validates_switches():
    switch = sgl_cpu_adapter.DISABLE_ENV
    base = {"PYTHONPATH": f"/some/where{os.pathsep}{engine_process.ADAPTER_DIR}", switch: "b1"}
    env = engine_process.cpu_adapter_env(base, ["b6", "B5"])
    assert env["PYTHONPATH"].split(os.pathsep) == [str(engine_process.ADAPTER_DIR), "/some/where"]
    assert env["HF_HUB_OFFLINE"] == "1" and env[switch] == "b5,b6"
    assert switch not in engine_process.cpu_adapter_env(base)
    assert base[switch] == "b1"  # the caller's dict is not modified
    with pytest.raises(ValueError, match="b9"):
        engine_process.cpu_adapter_env({}, ["b9"])


def test_the_switch_is_not_a_name_sglang_claims():
    """sglang rewrites SGL_* to SGLANG_* with a deprecation warning in every process, and treats SGLANG_* as its own."""
    assert not sgl_cpu_adapter.DISABLE_ENV.startswith(("SGL_", "SGLANG_"))


def test_adapter_switch_parsing():
    assert sgl_cpu_adapter.parse_disabled(None) == frozenset()
    assert sgl_cpu_adapter.parse_disabled(" b5, b2a ,") == {"b5", "b2a"}
    assert sgl_cpu_adapter.parse_disabled("all") == set(sgl_cpu_adapter.PATCHES)
    with pytest.raises(ValueError, match="known: b0"):
        sgl_cpu_adapter.parse_disabled("b5,nope")


def test_summarize_keeps_applied_and_not_needed_patches_apart():
    lines = ["[sgl-cpu-adapter] active (pid 7): checking b0,b2,b2a,b3,b4,b5; absent: b1,b6; disabled: none",
             "[sgl-cpu-adapter] b0 applied (pid 7): torchvision's C ops did not load",
             "[sgl-cpu-adapter] b2 not-needed (pid 7): CpuPlatform defines get_local_torch_device itself",
             "Loaded vae: AutoencoderKL (sgl-diffusion version)",
             "[sgl-cpu-adapter] active (pid 8): checking b0,b2,b2a,b3,b4,b5; absent: b1,b6; disabled: b3",
             "[sgl-cpu-adapter] b5 applied (pid 8): the engine asked torch.cpu for reset_peak_memory_stats"]
    summary = adapter_record.summarize(lines)
    assert summary["active"] and summary["pids"] == [7, 8] and summary["disabled"] == ["b3"]
    assert summary["applied"] == ["b0", "b5"] and summary["memory_source"] == "process_rss"
    not_needed = {n["id"]: n["reason"] for n in summary["not_needed"]}
    assert list(not_needed) == ["b1", "b2", "b2a", "b4", "b6"]
    assert not_needed["b2"] == "CpuPlatform defines get_local_torch_device itself"
    assert not_needed["b1"] == not_needed["b6"] == "the module it hooks is absent from this engine"
    assert "init_process_group" in not_needed["b4"]
    assert adapter_record.summarize(["Loaded vae"]) is None
    inactive = adapter_record.summarize(["[sgl-cpu-adapter] inactive: accelerator_present (pid 9)"])
    assert inactive["active"] is False and inactive["applied"] == inactive["not_needed"] == []


def test_summarize_counts_the_forked_worker_and_ignores_patches_an_older_log_never_had():
    checking = "checking b0,b2,b2a,b3,b4,b5,fork; absent: b1,b6; disabled: none"
    forked = [f"[sgl-cpu-adapter] active (pid 7): {checking}",
              "[sgl-cpu-adapter] b0 applied (pid 7): torchvision's C ops did not load",
              "[sgl-cpu-adapter] fork applied (pid 7): the scheduler worker forks from this process",
              f"[sgl-cpu-adapter] active (pid 8): {checking}"]
    summary = adapter_record.summarize(forked)
    assert summary["applied"] == ["b0", "fork"] and summary["pids"] == [7, 8]
    unstarted = adapter_record.summarize(forked[:2])
    assert {n["id"]: n["reason"] for n in unstarted["not_needed"]}["fork"] == "the engine started no scheduler worker"
    older = adapter_record.summarize([line.replace(",fork", "") for line in forked[:2]])
    assert "fork" not in [n["id"] for n in older["not_needed"]] and older["applied"] == ["b0"]


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.torch
def test_adapter_is_lazy_and_chains_an_existing_sitecustomize(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.CHAINED_SITECUSTOMIZE = True\n")
    env = engine_process.cpu_adapter_env(dict(os.environ))
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    proc = run_python("""
        import builtins, sys
        print(getattr(builtins, "CHAINED_SITECUSTOMIZE", False), "torch" in sys.modules,
              [type(f).__name__ for f in sys.meta_path][0])
    """, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "_Hooks"] and "[sgl-cpu-adapter]" not in proc.stderr


@pytest.mark.torch
@pytest.mark.parametrize("disabled", [[], ["gc"]], ids=["gc-on", "gc-switched-off"])
def test_the_collector_is_off_while_the_engine_imports_and_on_with_the_import_frozen_after(tmp_path, disabled):
    """The gc patch around an entry module of the engine's name (a stand-in package ahead of the real sglang): off
    while it executes, on and frozen once it has loaded, said once; with its switch off the collector is left alone."""
    cli = tmp_path.joinpath("sglang", "multimodal_gen", "runtime", "entrypoints", "cli")
    cli.mkdir(parents=True)
    for package in (cli, *list(cli.parents)[:4]):
        package.joinpath("__init__.py").write_text("")
    cli.joinpath("generate.py").write_text("import gc\nCOLLECTING_DURING_IMPORT = gc.isenabled()\n")
    env = engine_process.cpu_adapter_env(dict(os.environ), disabled)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(tmp_path)])
    proc = run_python("""
        import gc
        print(gc.isenabled())
        from sglang.multimodal_gen.runtime.entrypoints.cli import generate
        print(generate.COLLECTING_DURING_IMPORT, gc.isenabled(), gc.get_freeze_count() > 0)
    """, env)
    assert proc.returncode == 0, proc.stderr
    summary = adapter_record.summarize(proc.stderr.splitlines())
    if disabled:
        assert proc.stdout.split() == ["True", "True", "True", "False"] and summary is None  # no hook on this module
    else:
        assert proc.stdout.split() == ["False", "False", "True", "True"] and summary["applied"] == ["gc"]
        assert "the garbage collector was off while sglang imported" in summary["reasons"]["gc"]


@pytest.mark.torch
def test_adapter_b0_lets_torchvision_import_and_its_switch_turns_it_off():
    """A real post-import hook: torchvision (a CUDA wheel here) imports beside CPU torch only with b0 on."""
    probe = "import torchvision.ops, torch; print(torch.cpu.is_available())"
    patched = run_python(probe, engine_process.cpu_adapter_env(dict(os.environ)))
    unpatched = run_python(probe, engine_process.cpu_adapter_env(dict(os.environ), ["b0"]))
    if unpatched.returncode == 0:
        pytest.skip("torchvision's own C ops load here: b0 has nothing to fix")
    assert patched.returncode == 0, patched.stderr[-2000:]
    summary = adapter_record.summarize(patched.stderr.splitlines())
    assert summary["active"] and summary["applied"] == ["b0"] and summary["memory_source"] is None
    assert "operator torchvision::nms does not exist" in unpatched.stderr


@pytest.mark.torch
def test_adapter_stays_inactive_when_torch_sees_an_accelerator():
    """Simulated accelerator: the first hook decides, announces 'inactive' and patches nothing (b0 included)."""
    proc = run_python("""
        import torch
        torch.accelerator.is_available = lambda: True
        try:
            import torchvision
            print(torchvision.extension._has_ops())  # its own ops loaded: nothing to patch anyway
        except RuntimeError as error:
            print("torchvision::nms does not exist" in str(error))  # b0 was not applied
    """, engine_process.cpu_adapter_env(dict(os.environ)))
    announced = [a for a in map(adapter_record.parse_line, proc.stderr.splitlines()) if a]
    assert [(a["kind"], a["active"]) for a in announced] == [("process", False)]
    assert proc.stdout.split() == ["True"], proc.stderr[-2000:]


@pytest.mark.torch
def test_adapter_checks_each_gap_in_the_installed_engine():
    """The real engine's CPU platform module: a platform method the engine defines is left alone (not needed), one it
    inherits from the base Platform is patched, and the torch.cpu memory stand-in applies only when asked for."""
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("no sglang installed")
    proc = run_python("""
        import torch
        import sglang.multimodal_gen.runtime.platforms.cpu as cpu
        print(cpu.CpuPlatform.get_local_torch_device())
        print(*(m in vars(cpu.CpuPlatform) for m in ("get_local_torch_device", "get_attn_backend_cls_str",
                                                     "get_torch_distributed_backend_str")))
        torch.cpu.reset_peak_memory_stats()
        print(torch.cpu.max_memory_reserved() > 0)
        try:
            torch.cpu.no_such_function
        except AttributeError:
            print("AttributeError")
    """, engine_process.cpu_adapter_env(dict(os.environ)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    words = proc.stdout.split()
    assert words[0] == "cpu" and words[4:] == ["True", "AttributeError"]
    outcomes = {p["patch"]: p["outcome"] for p in map(adapter_record.parse_line, proc.stderr.splitlines())
                if p and p["kind"] == "patch"}
    for patch, own in zip(("b2", "b2a", "b3"), words[1:4], strict=True):  # the engine's own method, or the base class's
        assert outcomes[patch] == ("not-needed" if own == "True" else "applied"), (patch, proc.stderr[-2000:])
    assert outcomes["b5"] == "applied"
