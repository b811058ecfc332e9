"""The GPU test harness (tests/gpu_harness) that lets the real engine run on a lent H200 without the 352 MB
sglang-kernel wheel: its stand-ins cover what sglang 0.5.10.post1 and 0.5.23 import at load on CUDA, and the two
functions that execute (rmsnorm, and weak_ref_tensor for 0.5.23's breakable CUDA graphs) behave like the real ones.
Checked in a fresh interpreter with the harness on PYTHONPATH, as the engine's processes get it."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

HARNESS = REPO / "tests" / "gpu_harness"
# Names the H200 runs needed at load on CUDA (0.5.10.post1: runtime doc; 0.5.23: found on the machine).
NEEDED_0510 = ("rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "gelu_and_mul", "fp8_blockwise_scaled_mm",
               "fp8_scaled_mm", "gptq_gemm", "gptq_shuffle", "int8_scaled_mm", "moe_align_block_size", "moe_sum",
               "qserve_w4a8_per_chn_gemm", "qserve_w4a8_per_group_gemm", "sgl_per_token_group_quant_8bit",
               "sgl_per_token_quant_fp8")
NEEDED_0523 = ("weak_ref_tensor", "gelu_tanh_and_mul", "gemma_rmsnorm", "gemma_fused_add_rmsnorm", "moe_sum_reduce",
               "top_k_renorm_prob", "top_p_renorm_prob")


def harness_python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HARNESS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.torch
def test_stand_in_serves_every_name_both_releases_import_and_keeps_flash_attn_absent():
    code = f"""
import json, importlib, sgl_kernel
from sgl_kernel.scalar_type import scalar_types
from sgl_kernel.quantization import ggml_dequantize
from sgl_kernel.kvcacheio import transfer_kv_direct, transfer_kv_per_layer
missing = [n for n in {NEEDED_0510 + NEEDED_0523!r} if not callable(getattr(sgl_kernel, n, None))]
try:
    importlib.import_module("sgl_kernel.flash_attn")
    fa = "importable"
except ImportError:
    fa = "absent"
try:
    sgl_kernel.moe_sum_reduce()
    raised = False
except NotImplementedError:
    raised = True
print(json.dumps({{"missing": missing, "flash_attn": fa, "placeholder_raises": raised,
                  "uint4b8": str(scalar_types.uint4b8), "file": sgl_kernel.__file__}}))
"""
    run = harness_python(code)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc == {"missing": [], "flash_attn": "absent", "placeholder_raises": True, "uint4b8": "uint4b8",
                   "file": str(HARNESS / "standins" / "sgl_kernel" / "__init__.py")}
    assert "[gpu-harness] no real 'sgl_kernel' importable: using the stand-in" in run.stderr


@pytest.mark.torch
def test_weak_ref_tensor_is_a_non_owning_alias_and_rmsnorm_matches_its_definition():
    code = """
import json, sys, torch, sgl_kernel
base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
view = base[1:, 2:]
alias = sgl_kernel.weak_ref_tensor(view)
same = (alias.data_ptr() == view.data_ptr() and alias.shape == view.shape and alias.stride() == view.stride()
        and alias.dtype == view.dtype and torch.equal(alias, view))
alias[0, 0] = -1.0
refs_before = sys.getrefcount(base.untyped_storage())
x = torch.randn(5, 8, dtype=torch.bfloat16)
w = torch.randn(8, dtype=torch.bfloat16)
ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(torch.bfloat16)
out = torch.empty_like(x)
sgl_kernel.rmsnorm(x, w, 1e-6, out=out)
print(json.dumps({"same": same, "write_through": float(base[1, 2]), "passthrough": sgl_kernel.weak_ref_tensor(7),
                  "rmsnorm_exact": torch.equal(out, ref), "owns_storage": alias.untyped_storage()._cdata ==
                  base.untyped_storage()._cdata}))
"""
    run = harness_python(code)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    # Same memory, shape and strides; writes reach the original; but a storage object of its own (no ownership).
    assert doc == {"same": True, "write_through": -1.0, "passthrough": 7, "rmsnorm_exact": True,
                   "owns_storage": False}
    assert "[gpu-harness] stand-in sgl_kernel.weak_ref_tensor executed" in run.stderr


def _engine_root() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        pytest.skip("sglang is not installed")
    return Path(spec.origin).parent


def test_kvcacheio_stand_in_covers_every_name_the_installed_engine_imports_from_it():
    """Scans the installed sglang: a name missing here would fail the import inside a guarded block and quietly
    change which classes the engine loads (seen on the H200: CLIP as the plain Hugging Face class)."""
    imported = set()
    for path in (_engine_root() / "srt").rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "sgl_kernel.kvcacheio" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module == "sgl_kernel.kvcacheio":
                imported |= {alias.name for alias in node.names}
    imported.discard("get_device_accessible_ptr")  # probed with try/except and hasattr(torch.ops...): absent is fine
    assert imported, "the installed engine no longer imports sgl_kernel.kvcacheio: drop the stand-in module"
    run = harness_python(f"import sgl_kernel.kvcacheio as k; print([n for n in {sorted(imported)!r} "
                         "if not callable(getattr(k, n, None))])")
    assert run.returncode == 0 and run.stdout.strip() == "[]", run.stdout + run.stderr


def test_the_video_stand_ins_write_what_sglang_pipes_and_read_back_what_pyav_reads(tmp_path):
    """sglang 0.5.23 writes a video by piping raw frames to imageio-ffmpeg's binary (its _save_video_ffmpeg command);
    on the machine the harness's ffmpeg stand-in writes them with OpenCV and its av stand-in reads them back: the
    frames the real PyAV decodes from the same file. Other commands and LTX-2's uses of av still fail."""
    import av
    import numpy as np

    video, frames = tmp_path / "out.mp4", tmp_path / "frames.npy"
    code = """
import subprocess, sys
import numpy as np
sys.path.insert(0, {standins!r})
import av, imageio_ffmpeg
assert av.__file__.startswith({standins!r}) and imageio_ffmpeg.__file__.startswith({standins!r})
rng = np.random.default_rng(0)
raw = b"".join(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8).tobytes() for _ in range(5))
head = [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-f", "rawvideo", "-vcodec", "rawvideo", "-s", "64x48", "-pix_fmt",
        "rgb24", "-r", "8.00", "-i", "pipe:0", "-an", "-vcodec", "libx264", "-preset", "fast", "-pix_fmt", "yuv420p",
        "-crf", "10"]
assert subprocess.run([*head, "-vf", "scale=64:48", {video!r}], input=raw).returncode == 1
assert subprocess.run([*head, {video!r}], input=raw).returncode == 0
with av.open({video!r}) as container:
    assert container.streams.video
    np.save({frames!r}, np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]))
try:
    av.VideoFrame.from_ndarray(None)
except NotImplementedError:
    print("raised")
""".format(standins=str(HARNESS / "standins"), video=str(video), frames=str(frames))
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "raised", run.stdout + run.stderr
    assert "5 frame(s) 64x48 written" in run.stderr and "unsupported command" in run.stderr
    with av.open(str(video)) as container:
        real = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
    assert real.shape == (5, 48, 64, 3) and np.array_equal(np.load(frames), real)


def test_carry_list_pins_one_cp312_compatible_wheel_per_project_with_its_hash():
    """wheels-0.5.23.sha256 is what make_carry.sh downloads and checks: one version of each project (two stop the
    device's install), each a wheel the H200's Python 3.12 can take, each with a sha256."""
    projects: dict[str, str] = {}
    for line in (HARNESS / "wheels-0.5.23.sha256").read_text().splitlines():
        digest, name = line.split()
        assert len(digest) == 64 and int(digest, 16) >= 0
        project, version, *_, python_tag, abi_tag, platform = name.removesuffix(".whl").split("-")
        assert project not in projects, f"two versions of {project}"
        projects[project] = version
        assert python_tag in ("py3", "py2.py3", "cp312", "cp310") and abi_tag in ("none", "abi3", "cp312")
        assert platform == "any" or "x86_64" in platform
    assert {"diffusers", "msgspec", "jsonschema", "apache_tvm_ffi"} <= set(projects)


def test_harness_runs_from_a_private_copy_and_make_carry_names_the_sglang_platform_tag():
    """The collecting call re-sends the working tree; the pipeline must not run inside it (12-01 and 12-03 lost two
    reference rows that way). sglang 0.5.23's wheel is tagged manylinux_2_34, which pip matches only when named."""
    for script in ("run_h200_0523.sh", "make_carry.sh"):
        assert subprocess.run(["bash", "-n", str(HARNESS / script)]).returncode == 0
    run = (HARNESS / "run_h200_0523.sh").read_text()
    start = run[run.index("    start)"):]
    assert start.index('cd "$SRC"') < start.index("setsid")
    assert "R=$SRC" in run
    carry = (HARNESS / "make_carry.sh").read_text()
    assert "manylinux_2_34_x86_64" in carry and "sha256sum -c" in carry and "wheels-0.5.23.sha256" in carry


@pytest.mark.torch
def test_without_cutlass_the_cutedsl_rope_module_is_a_stand_in_declining_every_tensor_and_named_in_the_log():
    """sglang 0.5.23's Wan blocks import the CuTe-DSL q/k norm-RoPE kernel's module on CUDA; without nvidia-cutlass-dsl
    that import fails and the engine falls back to diffusers' Wan. The harness serves a stand-in with every name the
    engine's kernel table maps to that module; it declines every tensor, and the log gate names it."""
    code = """
import json, torch
import sglang.kernels.ops.diffusion as ops
from sglang.kernels.ops.diffusion import can_use_fused_rmsnorm_interleaved_rope as can_use
names = sorted(n for n, m in ops._EXPORTS.items() if m == "rope.rmsnorm_interleaved_rope_cutedsl")
module = __import__("sglang.kernels.ops.diffusion.rope.rmsnorm_interleaved_rope_cutedsl", fromlist=["x"])
x = torch.zeros(4, 64)
print(json.dumps({"file": module.__file__, "names": names, "missing": [n for n in names if not hasattr(module, n)],
                  "can_use": can_use(x, torch.ones(64), torch.zeros(4, 16), 16)}))
"""
    assert importlib.util.find_spec("cutlass") is None  # as on the lent machine
    from sgl_diffusion_bench.engine import engine_process
    env = engine_process.cpu_adapter_env(dict(os.environ))  # sglang imports on CPU here with the adapter's b0
    env["PYTHONPATH"] = os.pathsep.join([str(HARNESS), env["PYTHONPATH"]])  # the harness first, chaining the adapter
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout)
    assert doc["file"] == str(HARNESS / "standins" / "no_cutedsl_rmsnorm_rope.py") and doc["can_use"] is False
    assert len(doc["names"]) == 4 and doc["missing"] == []
    from sgl_diffusion_bench.judging import log_gates, log_markers
    assert log_gates.scan_log(run.stderr, log_markers.markers_for_version("0.5.23")).standin_modules == ("cutlass",)
    env["PYTHONPATH"] = env["PYTHONPATH"].split(os.pathsep, 1)[1]  # the adapter alone
    plain = subprocess.run([sys.executable, "-c", "import sglang.kernels.ops.diffusion.rope."
                            "rmsnorm_interleaved_rope_cutedsl"], capture_output=True, text=True, env=env, timeout=120)
    assert plain.returncode == 1 and "ModuleNotFoundError" in plain.stderr  # the real module, without the harness
