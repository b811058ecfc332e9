"""SIGKILL, planted lock files and clashing campaigns, with real processes: a killed runner takes its engine with
it, a killed lease holder takes its command with it and frees the GPU, a killed run's cache child is reclaimed with
a ledger line, a lock path that is a symlink is never followed, and two campaigns on one label cannot both run.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import SCRIPTS, run_script
from sgl_diffusion_bench import contract, model_cache, owner
from sgl_diffusion_bench.engine import gpu
from sgl_diffusion_bench.campaign import run_claim

HOLDER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {scripts!r})
    from pathlib import Path
    from sgl_diffusion_bench import model_cache
    from sgl_diffusion_bench.campaign import run_claim
    from sgl_diffusion_bench.engine import engine_process, gpu
    tmp, what = Path({tmp!r}), {what!r}
    command = ["sh", "-c", f"echo $$ > {{tmp / 'command.pid'}}; exec sleep 300"]
    if what == "lease":
        lease = gpu.GpuLease(["GPU-a"], label="holder", lock_dir=tmp / "locks").acquire()
        engine_process.run_tied(command, dict(os.environ))
    elif what == "engine":
        engine_process.run_engine(command, dict(os.environ), tmp / "engine.log")
    elif what == "cache":
        model_cache.prepare_child_cache(tmp / "root", "org/m", "killed", held_by="run")
        (tmp / "command.pid").write_text(str(os.getpid()))
        time.sleep(300)
    elif what == "cleanup":
        prepared = model_cache.prepare_child_cache(tmp / "root", "org/m", "slow")
        for i in range(200):
            (prepared.child / "torch" / f"f{{i}}").write_bytes(b"x")
        def slow(dir_fd, name, kind, path):
            (tmp / "command.pid").write_text(str(os.getpid()))
            time.sleep(0.05)
            model_cache.remove_entry(dir_fd, name, kind, path)
        model_cache.cleanup_child_cache(tmp / "root", prepared.child, "success", tmp / "l.jsonl", remove=slow)
    elif what == "claim":
        claim = run_claim.claim_run(tmp / "p__l.report.json", "l")
        (tmp / "command.pid").write_text(str(os.getpid()))
        time.sleep(300)
""")


def _start(tmp: Path, what: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(scripts=str(SCRIPTS), tmp=str(tmp), what=what)])
    pid_file = tmp / "command.pid"
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, "holder did not start"
        time.sleep(0.05)
    return proc, int(pid_file.read_text())


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        if state == "Z":  # killed, waiting for init to reap it
            return True
        time.sleep(0.05)
    return False


def _sigkill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_sigkill_of_the_runner_takes_the_engine_with_it(tmp_path):
    proc, engine_pid = _start(tmp_path, "engine")
    _sigkill(proc)
    assert _gone(engine_pid), "the engine outlived its runner"


def test_sigkill_of_a_lease_holder_stops_its_command_and_frees_the_gpu(tmp_path):
    proc, command_pid = _start(tmp_path, "lease")
    with pytest.raises(contract.PreconditionError) as info:
        gpu.GpuLease(["GPU-a"], lock_dir=tmp_path / "locks").acquire()
    assert info.value.code == "gpu.leased"
    _sigkill(proc)
    assert _gone(command_pid), "the leased command outlived its lease"
    with gpu.GpuLease(["GPU-a"], lock_dir=tmp_path / "locks") as lease:
        assert lease.reclaimed == [{"uuid": "GPU-a", "stale_pid": proc.pid}]


def test_a_killed_runs_cache_child_is_reclaimed_with_a_ledger_line(tmp_path):
    proc, _ = _start(tmp_path, "cache")
    live = model_cache.prepare_child_cache(tmp_path / "root", "org/m", "alive", held_by="run")  # this process's
    assert model_cache.reclaim_stale_children(tmp_path / "root", tmp_path / "l.jsonl") == model_cache.Reclaim((), ())
    _sigkill(proc)
    reclaim = model_cache.reclaim_stale_children(tmp_path / "root", tmp_path / "l.jsonl")
    (entry,), kept = reclaim.cleaned, reclaim.kept
    assert kept == () and entry["owner"]["kind"] == "run" and entry["owner"]["pid"] == proc.pid
    assert entry["ok"] and entry["exit_reason"] == "reclaimed" and entry["label"] == "killed"
    assert not Path(entry["cache_dir"]).exists() and live.child.is_dir()
    lines = [json.loads(line) for line in (tmp_path / "l.jsonl").read_text().splitlines()]
    assert [(e["phase"], e["exit_reason"]) for e in lines] == [("started", "reclaimed"), ("finished", "reclaimed")]


def test_a_cleanup_killed_midway_leaves_its_started_line_and_finishes_on_rerun(tmp_path):
    proc, _ = _start(tmp_path, "cleanup")
    time.sleep(0.3)
    _sigkill(proc)
    (started,) = [json.loads(line) for line in (tmp_path / "l.jsonl").read_text().splitlines()]
    assert started["phase"] == "started" and not started["ok"]
    (child,) = (tmp_path / "root").glob("org_m-slow")
    assert (child / model_cache.MANIFEST_NAME).is_file()  # kept: the rerun still recognises the child as ours
    first = model_cache.verify_ledger(tmp_path / "l.jsonl")
    assert first["residue_count"] == 1 and first["entries"][0]["recorded_ok"] is False  # the unfinished cleanup
    assert model_cache.cleanup_child_cache(tmp_path / "root", child.name, "success", tmp_path / "l.jsonl")["ok"]
    assert model_cache.verify_ledger(tmp_path / "l.jsonl")["residue_count"] == 0


def test_a_campaign_checks_its_ledger_and_claims_its_label_before_anything_runs(tmp_path):
    from sgl_diffusion_bench.engine import capabilities
    from sgl_diffusion_bench.campaign import bench_request
    from sgl_diffusion_bench.cli import bench

    def assemble(ledger: Path):
        args = bench.build_parser().parse_args([
            "--model", "tiny-flux-cpu", "--label", "c", "--output-dir", str(tmp_path / "out"),
            "--engine-capabilities", "recent", "--model-cache-root", str(tmp_path / "cache"),
            "--cleanup-model-cache", "--cleanup-ledger", str(ledger)])
        return bench_request.assemble(bench.request_from(args), capabilities.recent_engine_capabilities)

    (tmp_path / "a-directory").mkdir()
    with pytest.raises(contract.PreconditionError) as info:
        assemble(tmp_path / "a-directory")
    assert info.value.code == "cache.ledger_unwritable" and not list((tmp_path / "out").glob("*.claim"))
    [(_, first)] = assemble(tmp_path / "l.jsonl")
    with pytest.raises(contract.PreconditionError) as info:
        assemble(tmp_path / "l.jsonl")
    assert info.value.code == "run.label_in_use"
    first.claim.release()


def test_owner_liveness_is_not_fooled_by_a_reused_pid():
    me = owner.record()
    assert owner.alive(me)
    assert not owner.alive(dict(me, start_ticks=me["start_ticks"] - 1))  # same pid, another process
    assert owner.alive(dict(me, host="another-host"))  # cannot look: assumed alive, never reclaimed


def test_two_campaigns_on_one_label_cannot_both_run(tmp_path):
    report = tmp_path / "p__l.report.json"
    proc, _ = _start(tmp_path, "claim")
    with pytest.raises(contract.PreconditionError) as info:
        run_claim.claim_run(report, "l")
    assert info.value.code == "run.label_in_use"
    _sigkill(proc)  # died before starting any cell: its claim is taken over
    claim = run_claim.claim_run(report, "l")
    claim.mark_started()
    claim.release()
    with pytest.raises(contract.PreconditionError) as info:  # a campaign that started keeps its label for good
        run_claim.claim_run(report, "l")
    assert info.value.code == "run.label_taken"


def test_symlinked_lock_files_are_never_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    os.symlink(victim, locks / "gpu-GPU-a.lock")
    os.mkfifo(locks / "gpu-GPU-b.lock")
    for uuid in ("GPU-a", "GPU-b"):
        with pytest.raises(contract.PreconditionError) as info:
            gpu.GpuLease([uuid], lock_dir=locks).acquire()
        assert info.value.code == "gpu.lock_file_unsafe"
        assert gpu.lease_holder(uuid, locks) is None
    assert victim.read_text() == "precious"


def test_lock_directories_per_user_by_default_and_checked(tmp_path):
    default = gpu.default_lock_dir({"XDG_RUNTIME_DIR": str(tmp_path)})
    assert default == tmp_path / "sglang-diffusion-gpu-locks"
    assert gpu.default_lock_dir({}).name == f"sglang-diffusion-gpu-locks-{os.getuid()}"
    gpu.ensure_lock_dir(default)
    assert stat.S_IMODE(default.stat().st_mode) == 0o700
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    os.symlink(default, tmp_path / "link")
    for bad in (open_dir, tmp_path / "link"):
        with pytest.raises(contract.PreconditionError) as info:
            gpu.GpuLease(["GPU-a"], lock_dir=bad).acquire()
        assert info.value.code == "gpu.lock_dir_unsafe" and info.value.exit_code == contract.ExitCode.PRECONDITION
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with gpu.GpuLease(["GPU-a"], lock_dir=shared):
        assert gpu.lease_holder("GPU-a", shared)["pid"] == os.getpid()
    if os.getuid() == 0:  # another user's lock file in a shared sticky directory: locked read-only, not rewritten
        os.chown(shared / "gpu-GPU-a.lock", 4242, 4242)
        os.chmod(shared / "gpu-GPU-a.lock", 0o644)
        with gpu.GpuLease(["GPU-a"], lock_dir=shared):
            pass
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o755)
        os.chown(foreign, 4242, 4242)
        with pytest.raises(contract.PreconditionError) as info:
            gpu.GpuLease(["GPU-a"], lock_dir=foreign).acquire()
        assert info.value.code == "gpu.lock_dir_unsafe"


@pytest.mark.engine
def test_real_campaign_clash_then_sigkill_leaves_no_engine_and_a_reclaimable_cache(tmp_path):
    """One real tiny-engine campaign: a second campaign on its label is refused while it runs (exit 3, before
    anything runs); SIGKILL of the first leaves no engine process, and its cache child is reclaimed, ledgered."""
    args = ["--model", "tiny-flux-cpu", "--label", "clash", "--output-dir", str(tmp_path / "out"),
            "--model-cache-root", str(tmp_path / "cache"), "--cleanup-model-cache", "--json"]
    first = subprocess.Popen([sys.executable, str(SCRIPTS / "bench_diffusion_denoise.py"), *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in first.stderr:
        if line.startswith("[cell 1/") and "starting" in line:
            break
    second = run_script("bench_diffusion_denoise", *args, timeout=600)
    assert second.returncode == contract.ExitCode.PRECONDITION
    assert second.document["error"]["code"] in ("run.label_in_use", "run.label_taken")
    time.sleep(2)  # let the engine start
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    first.stderr.close()
    first.stdout.close()
    leftovers = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
        if not leftovers:
            break
        time.sleep(0.5)
    assert leftovers == [], "an engine process outlived the SIGKILLed runner"
    (entry,) = model_cache.reclaim_stale_children(tmp_path / "cache", tmp_path / "out" / "cleanup.jsonl").cleaned
    assert entry["ok"] and entry["exit_reason"] == "reclaimed"
    assert not list((tmp_path / "cache").glob("*-clash"))
