"""The engine capability probe: the real installed engine once per session, the static fallback on real-shaped
sources, the profiler env rule, and the cache."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_main, run_script
from engine_release import DEFAULT_RELEASE, INSTALLED, OLDER_RELEASE, expects
from sgl_diffusion_bench.engine import capabilities, engine_probe, engine_sources


@pytest.fixture(scope="session")
def installed_probe(tmp_path_factory):
    """The real probe, once per session: the cache sits in the session's base temp dir, shared by test modules."""
    return engine_probe.probe_engine(tmp_path_factory.getbasetemp() / "engine-capabilities.json")


@pytest.mark.engine
@expects(OLDER_RELEASE)
def test_installed_engine_is_0_5_10_post1_with_its_cli(installed_probe):
    caps = installed_probe.capabilities
    assert caps.version == "0.5.10.post1" and caps.method == "argparse", caps.problems
    assert caps.warmup_flag == "--warmup"
    assert caps.quality_values is None and not caps.has_bcg
    for absent in ("--warmup-mode", "--component-residency", "--performance-mode", "--cfg-parallel-size",
                   "--warmup-num-frames", "--bcg-text-buckets"):
        assert not caps.has_flag(absent), absent
    for present in ("--perf-dump-path", "--warmup-resolutions", "--enable-cfg-parallel", "--pin-cpu-memory",
                    "--backend", "--output-file-name", "--profile"):
        assert caps.has_flag(present), present
    assert caps.choices["--backend"] == ("auto", "sglang", "diffusers")
    assert caps.offload_flags == capabilities.OFFLOAD_FLAGS
    assert caps.profiler_dir_env == ("SGLANG_TORCH_PROFILER_DIR",) and caps.profiler_dir_env_source == "source"
    assert caps.accepts_flag("--transformer-path") and not caps.accepts_flag("--quality")
    assert caps.dynamic_prefixes == ("--component-paths.",) and caps.dynamic_suffixes == ("-path",)


@pytest.mark.engine
@expects(DEFAULT_RELEASE)
def test_installed_engine_is_0_5_23_with_its_cli_and_quality_levels(installed_probe):
    caps = installed_probe.capabilities
    assert caps.version == "0.5.23" and caps.method == "argparse" and caps.degraded is None, caps.problems
    assert caps.has_bcg and caps.warmup_flag == "--warmup-mode"
    assert caps.choices["--warmup-mode"] == ("off", "request", "server")
    assert caps.quality_values == ("exact", "lossless", "high", "extra-high")  # the parser's choices
    assert caps.quality_levels == ("exact", "lossless", "high") and caps.quality_aliases == {"extra-high": "lossless"}
    assert caps.canonical_quality("extra-high") == "lossless"
    for present in ("--component-residency", "--performance-mode", "--warmup-steps", "--warmup-resolutions",
                    "--bcg-text-buckets"):
        assert caps.has_flag(present), present
    assert not caps.has_flag("--warmup")  # retired in 0.5.23
    assert caps.flag_acceptance("--transformer-quantization") == "model-dependent"
    assert caps.flag_acceptance("--component-attention-backends.transformer") == "model-dependent"
    assert caps.profiler_dir_env == ("SGLANG_DIFFUSION_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR")


def _venv_without(tmp_path, hidden: tuple[str, ...]):
    """A real interpreter whose site-packages is this one's minus ``hidden`` (a broken engine install)."""
    import sysconfig
    import venv
    target = tmp_path / "broken"
    venv.EnvBuilder(with_pip=False).create(target)
    site = next((target / "lib").glob("python*/site-packages"))
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(hidden) and not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    return target / "bin" / "python"


@pytest.mark.engine
@expects(DEFAULT_RELEASE)
def test_a_broken_engine_install_gives_a_degraded_probe_that_is_never_cached(tmp_path):
    """The real 0.5.23 install minus apache-tvm-ffi, driven through --engine-python: the parser cannot import."""
    python = _venv_without(tmp_path, ("tvm_ffi", "apache_tvm_ffi"))
    work = {"DIFFUSION_BENCH_WORKDIR": str(tmp_path / "work")}
    run = run_script("bench_diffusion_denoise", "--probe-engine", "--engine-python", str(python), "--json", env=work)
    doc = run.document
    assert run.returncode == 3 and doc["schema"] == "engine.v1" and not doc["ok"]
    degraded = doc["engine"]["degraded"]
    assert degraded["missing_module"] == "tvm_ffi" and "install apache-tvm-ffi" in degraded["hint"]
    assert doc["engine"]["method"] == "static_source" and doc["engine"]["python"] == str(python)
    assert doc["cache"]["written"] is False and not Path(doc["cache"]["path"]).exists()
    accepted = run_script("bench_diffusion_denoise", "--probe-engine", "--engine-python", str(python),
                          "--accept-degraded-probe", "--json", env=work)
    assert accepted.returncode == 0 and accepted.document["engine"]["degraded"] == degraded
    matrix = run_script("bench_diffusion_denoise", "--model", "qwen", "--quality-bcg-matrix", "--dry-run",
                        "--engine-python", str(python), "--json", env=work)
    assert matrix.returncode == 3 and matrix.document["error"]["code"] == "engine.probe_degraded"
    assert "apache-tvm-ffi" in matrix.document["error"]["hint"] and "newer" not in matrix.document["error"]["hint"]


@pytest.mark.engine
def test_second_probe_is_a_cache_hit(installed_probe):
    again = engine_probe.probe_engine(installed_probe.cache_path)
    assert again.cache_hit and again.capabilities == installed_probe.capabilities
    cached = json.loads(installed_probe.cache_path.read_text())
    assert json.loads(cached["key"])[1:3] == [sys.executable, INSTALLED]


@pytest.mark.engine
def test_static_fallback_agrees_with_argparse_on_the_installed_sources(installed_probe):
    caps = installed_probe.capabilities
    static = engine_sources.static_parser_actions(__import__("pathlib").Path(caps.package_dir))
    flags = {o for a in static for o in a["options"] if o.startswith("--")}
    assert flags <= caps.flags
    # Only flags built at run time are beyond a static read: the nested --dit-config./--vae-config. ones, and
    # (0.5.23) the --rollout* group another module contributes.
    assert all(f.startswith(("--dit-config.", "--vae-config.", "--rollout")) for f in caps.flags - flags)


def _fake_package(tmp_path, profiler_text):
    pkg = tmp_path / "sglang"
    cli = pkg / "multimodal_gen/runtime/entrypoints/cli"
    cli.mkdir(parents=True)
    (cli / "generate.py").write_text(textwrap.dedent('''
        def add_args(parser, prefix=""):
            parser.add_argument("--perf-dump-path", type=str)
            parser.add_argument(f"--{prefix}warmup-mode", choices=["off", "request", "server"])
            parser.add_argument("--quality", choices=QualityLevel.choices())
            parser.add_argument("-x", "--enable-breakable-cuda-graph", action="store_true")
            add_argument("--seed", type=int)
            parser.set_defaults(x=1)
    '''))
    utils = pkg / "multimodal_gen/runtime/utils"
    utils.mkdir(parents=True)
    if profiler_text is not None:
        (utils / "profiler.py").write_text(profiler_text)
    return pkg


def test_static_parser_reads_literal_options_and_choices(tmp_path):
    pkg = _fake_package(tmp_path,
                        'os.getenv("SGLANG_DIFFUSION_TORCH_PROFILER_DIR") or os.getenv("SGLANG_TORCH_PROFILER_DIR")')
    caps = engine_probe.capabilities_from_actions(engine_sources.static_parser_actions(pkg), version="9.9",
                                                  package_dir=pkg, method="static_source")
    assert caps.flags == {"--perf-dump-path", "--warmup-mode", "--quality", "--enable-breakable-cuda-graph", "--seed"}
    assert caps.choices == {"--warmup-mode": ("off", "request", "server")}
    assert caps.warmup_flag == "--warmup-mode" and caps.has_bcg
    assert caps.quality_values == ()  # the flag exists, its values could not be read statically
    assert caps.profiler_dir_env == ("SGLANG_DIFFUSION_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR")


@pytest.mark.parametrize("text, version, expected, source", [
    ('os.getenv("SGLANG_TORCH_PROFILER_DIR", "./logs")', "0.5.23", ("SGLANG_TORCH_PROFILER_DIR",), "source"),
    ("envs.SGLANG_DIFFUSION_TORCH_PROFILER_DIR", "0.5.10.post1",
     ("SGLANG_DIFFUSION_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR"), "source"),
    (None, "0.5.10.post1", ("SGLANG_TORCH_PROFILER_DIR",), "version_table"),
    (None, "0.5.9", ("SGLANG_TORCH_PROFILER_DIR",), "version_table"),
    (None, "0.5.23", ("SGLANG_DIFFUSION_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR"), "version_table"),
])
def test_profiler_dir_env_from_source_then_version_table(tmp_path, text, version, expected, source):
    pkg = _fake_package(tmp_path, text)
    assert engine_probe.profiler_dir_env_from_source(pkg, version) == (expected, source)


def test_cache_key_changes_with_source_mtime_and_version(tmp_path):
    pkg = _fake_package(tmp_path, None)
    key = engine_probe.cache_key("1.0", pkg)
    assert engine_probe.cache_key("1.1", pkg) != key
    gen = pkg / "multimodal_gen/runtime/entrypoints/cli/generate.py"
    st = gen.stat()
    import os
    os.utime(gen, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert engine_probe.cache_key("1.0", pkg) != key


def test_recent_capabilities_round_trip_and_describe_main():
    caps = capabilities.recent_engine_capabilities()
    assert caps.warmup_flag == "--warmup-mode" and caps.has_bcg
    assert set(caps.quality_values) >= {"lossless", "extra-high", "high"}
    assert caps.has_flag("--component-residency") and not caps.has_flag("--warmup")
    assert capabilities.EngineCapabilities.from_json(json.loads(json.dumps(caps.to_json()))) == caps


def test_probe_cli_with_a_saved_capability_file(tmp_path):
    run = run_main("bench_diffusion_denoise", "--probe-engine", "--engine-capabilities", "recent", "--json")
    assert run.returncode == 0 and run.document["engine"]["warmup_flag"] == "--warmup-mode"
    saved = tmp_path / "engine.json"
    saved.write_text(run.stdout)
    again = run_main("bench_diffusion_denoise", "--probe-engine", "--engine-capabilities", str(saved), "--json")
    assert again.document["engine"] == run.document["engine"] and again.document["cache"] is None
    saved.write_text(json.dumps({"schema": "engine.v1"}))
    bad = run_main("bench_diffusion_denoise", "--probe-engine", "--engine-capabilities", str(saved), "--json")
    assert bad.returncode == 2 and bad.document["error"]["code"] == "input.schema_mismatch"


@pytest.mark.engine
def test_probe_cli_on_the_installed_engine_reads_the_session_cache(installed_probe, tmp_path):
    cache = tmp_path / ".cache" / "engine-capabilities.json"
    cache.parent.mkdir()
    cache.write_text(installed_probe.cache_path.read_text())  # the CLI finds the session's probe: no second probe
    run = run_script("bench_diffusion_denoise", "--probe-engine", "--json", timeout=300,
                     env={"DIFFUSION_BENCH_WORKDIR": str(tmp_path)})
    assert run.returncode == 0
    assert run.document["engine"] == installed_probe.capabilities.to_json()
    assert run.document["cache"] == {"path": str(cache), "hit": True, "written": False}
