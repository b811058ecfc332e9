"""The hostile inputs of issue 24 (an adversarial run against 995adfd), each with the exit and error code it gets now.

Before: compare_perf exited 70 on a finite 1.7e308 total (the change overflowed) and in group mode (fsum overflow),
hung past 60 s on a schema-valid 400,000-step dump; analyze_trace exited 70 on a 100,000-deep object; a FIFO,
/dev/zero or /dev/urandom given as a file hung a reader. Each case runs the real script; the slow or hanging ones as a
real process with a timeout, so a regression fails instead of stalling the suite.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, TEST_FIXTURES, run_main, run_script
from sgl_diffusion_bench import contract, inputs
from sgl_diffusion_bench.judging import engine_baselines, perf_dump
from sgl_diffusion_bench.results import perf_compare, sample_size

LOG = TEST_FIXTURES / "engine-cpu-0.5.23" / "native-ok" / "log.txt"
PERF = TEST_FIXTURES / "engine-cpu-0.5.23" / "native-ok" / "perf.json"
REPORT = TEST_FIXTURES / "bench-report" / "example.json"
HANG_S = 60  # what the adversarial run called a hang
OUT_OF_RANGE = "input.out_of_range"


def _dump(total: float, **extra: Any) -> dict[str, Any]:
    return {"total_duration_ms": total, "steps": [{"name": "DenoisingStage", "duration_ms": min(total, 50.0)}],
            **extra}


def _write(path: Path, document: Any) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def _error(run) -> tuple[int, str]:
    doc = run.document
    assert doc["schema"] == "error.v1" and doc["exit_code"] == run.returncode, doc
    return run.returncode, doc["error"]["code"]


def _finite_numbers(node: Any) -> bool:
    if isinstance(node, float):
        return math.isfinite(node)
    if isinstance(node, dict):
        return all(_finite_numbers(v) for v in node.values())
    if isinstance(node, list):
        return all(_finite_numbers(v) for v in node)
    return True


def test_a_finite_1_7e308_total_is_out_of_range_not_an_overflow(tmp_path):
    base, huge = _write(tmp_path / "a.json", _dump(1.0)), _write(tmp_path / "b.json", _dump(1.7e308))
    assert _error(run_main("compare_perf", base, huge, "--json")) == (2, OUT_OF_RANGE)
    assert "1.7e+308" in run_main("compare_perf", base, huge, "--json").document["error"]["message"]


def test_group_mode_over_1_7e308_totals_is_out_of_range_not_an_fsum_overflow(tmp_path):
    huge = [_write(tmp_path / f"h{i}.json", _dump(1.7e308)) for i in range(2)]
    small = [_write(tmp_path / f"s{i}.json", _dump(100.0 + i)) for i in range(2)]
    run = run_main("compare_perf", "--baseline", *huge, "--candidate", *small, "--resamples", "100", "--json")
    assert _error(run) == (2, OUT_OF_RANGE)


def test_the_figure_bound_is_inclusive(tmp_path):
    """1e12 ms (31 years) is the largest figure read; it compares, and every number in the document is finite."""
    paths = [_write(tmp_path / f"{i}.json", _dump(total)) for i, total in enumerate([1e12, 1.0])]
    run = run_main("compare_perf", *paths, "--json")
    assert run.returncode == 0 and _finite_numbers(run.document)
    over = _write(tmp_path / "over.json", _dump(inputs.MAX_FIGURE * 1.000001))
    assert _error(run_main("compare_perf", paths[0], over, "--json")) == (2, OUT_OF_RANGE)


def test_a_change_from_a_near_zero_baseline_is_refused_not_infinite(tmp_path):
    """(1e12 - 1e-300) / 1e-300 overflows a float: refused, in files and in group mode (the bootstrap too)."""
    tiny, big = _write(tmp_path / "tiny.json", _dump(1e-300)), _write(tmp_path / "big.json", _dump(1e12))
    assert _error(run_main("compare_perf", tiny, big, "--json")) == (2, OUT_OF_RANGE)
    sub = _write(tmp_path / "sub.json", _dump(5e-324))
    run = run_main("compare_perf", "--baseline", tiny, sub, "--candidate", big, big, "--resamples", "100", "--json")
    assert _error(run) == (2, OUT_OF_RANGE)


def test_a_vanishing_threshold_needs_samples_out_of_reach_not_a_division_by_zero(tmp_path):
    base = [_write(tmp_path / f"b{i}.json", _dump(100.0 + i)) for i in range(3)]
    cand = [_write(tmp_path / f"c{i}.json", _dump(101.0 + 2 * i)) for i in range(3)]
    run = run_main("compare_perf", "--baseline", *base, "--candidate", *cand, "--threshold-pct", "1e-300",
                   "--resamples", "100", "--json")
    assert run.returncode == 0 and _finite_numbers(run.document)
    floor = run.document["comparisons"][0]["statistics"]["metrics"]["e2e_ms"]["noise_floor"]
    assert floor["samples_per_arm_needed"] == sample_size.MAX_SAMPLES_STATED + 1  # out of reach, not an overflow
    markdown = perf_compare.render_markdown(run.document)
    assert f"more than {sample_size.MAX_SAMPLES_STATED:,} samples per arm (out of reach)" in markdown


def _timed_compare(tmp_path: Path, dump: dict[str, Any]) -> tuple[Any, float]:
    path = _write(tmp_path / "many.json", dump)
    started = time.process_time()  # this process's CPU time: what other processes do on the host does not count
    run = run_main("compare_perf", str(PERF), path, "--json")
    return run, time.process_time() - started


def test_a_400000_step_dump_is_compared_in_well_under_a_second(tmp_path):
    """It took past 60 s (jsonschema over every step, then one warning per repeated step); now one typed decoding
    pass. The bound leaves room for a busy 2-core host: 0.4 s on an idle one."""
    steps = [{"name": "DenoisingStage", "duration_ms": 0.01}] * 400_000
    run, elapsed = _timed_compare(tmp_path, _dump(5000.0, steps=steps))
    assert run.returncode == 0, run.stdout[-2000:]
    target = run.document["inputs"][1]["perf"]
    assert target["stages"]["DenoisingStage"] == pytest.approx(4000.0)
    assert target["warnings"].count("stage DenoisingStage appears more than once; its durations are summed") == 1
    assert elapsed < 5.0, f"{elapsed:.2f} s"


@pytest.mark.parametrize("key", ["steps", "denoise_steps_ms"])
def test_a_400000_step_dump_of_distinct_steps_is_refused_quickly(tmp_path, key):
    """400,000 different stage names (or denoising steps) are no request's record; comparing them would write a
    document of millions of rows. Refused, fast."""
    if key == "steps":
        dump = _dump(5000.0, steps=[{"name": f"Stage{i}", "duration_ms": 0.01} for i in range(400_000)])
    else:
        dump = _dump(5000.0, denoise_steps_ms=[{"step": i, "duration_ms": 0.01} for i in range(400_000)])
    run, elapsed = _timed_compare(tmp_path, dump)
    assert _error(run) == (2, OUT_OF_RANGE) and "400000" in run.document["error"]["message"]
    assert elapsed < 5.0, f"{elapsed:.2f} s"


DEEP = 100_000


def _deep_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("script, argv, code", [
    ("analyze_trace", lambda f: ["hotspots", f], "input.trace_corrupt"),
    ("compare_perf", lambda f: [str(PERF), f], "input.perf_dump_invalid"),
    ("render_bench_report", lambda f: [f], "input.unreadable"),
], ids=["trace", "perf-dump", "bench-report"])
def test_a_100000_deep_object_is_refused_like_a_deep_array(tmp_path, script, argv, code):
    path = tmp_path / "deep.json"
    if script == "analyze_trace":
        path.write_text('{"traceEvents": [], "x": ' + _deep_object(DEEP) + "}", encoding="utf-8")
    elif script == "compare_perf":
        path.write_text(json.dumps(_dump(10.0))[:-1] + ', "meta": ' + _deep_object(DEEP) + "}", encoding="utf-8")
    else:
        path.write_text(_deep_object(DEEP), encoding="utf-8")
    run = run_script(script, *argv(str(path)), "--json", timeout=HANG_S)
    assert _error(run) == (2, code)


def _baseline_dir(tmp_path: Path, kind: str) -> str:
    target = tmp_path / "sglang" / engine_baselines.BASELINE_DIR / "h100.json"
    target.parent.mkdir(parents=True)
    _make_special(target, kind)
    return str(tmp_path / "sglang")


def _make_special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(f"/dev/{kind}")


# Every reader a user hands a file to; each gets the special file and must refuse it before reading.
READERS = [
    ("compare_perf", lambda f, _: [str(PERF), f], "input.perf_dump_invalid"),
    ("judge_run", lambda f, _: ["--log", f, "--engine-version", "0.5.23"], "input.unreadable"),
    ("analyze_trace", lambda f, _: ["hotspots", f], "input.trace_unreadable"),
    ("render_bench_report", lambda f, _: [f], "input.unreadable"),
    ("compare_engine_baseline", lambda f, _: ["--report", f, "--gpu-class", "h100"], "input.unreadable"),
    ("compare_engine_baseline", lambda f, _: ["--perf-dump", f, "--gpu-class", "h100", "--engine-dir", "/nonexistent"],
     "input.perf_dump_invalid"),
    ("compare_engine_baseline", lambda _, engine_dir: ["--perf-dump", str(PERF), "--gpu-class", "h100", "--scenario",
                                                       "flux_image_t2i", "--engine-dir", engine_dir],
     "baseline.unreadable"),
    ("sweep_diffusion", lambda f, _: ["plan", f], "input.sweep_spec_unreadable"),
]


@pytest.mark.parametrize("kind", ["fifo", "zero", "urandom"])
@pytest.mark.parametrize("script, argv, code", READERS,
                         ids=["compare_perf", "judge-log", "analyze_trace", "render_bench_report",
                              "baseline-report", "baseline-perf-dump", "baseline-engine-file", "sweep-spec"])
def test_a_fifo_or_device_is_refused_before_it_is_read(tmp_path, kind, script, argv, code):
    special = tmp_path / "input.json"
    _make_special(special, kind)
    engine_dir = _baseline_dir(tmp_path / "engine", kind)
    run = run_script(script, *argv(str(special), engine_dir), "--json", timeout=HANG_S)
    assert _error(run) == (2, code)
    assert "regular file" in run.document["error"]["message"]


@pytest.mark.parametrize("kind", ["fifo", "zero", "urandom"])
def test_judge_run_counts_a_fifo_or_device_perf_dump_as_no_perf_dump_without_reading_it(tmp_path, kind):
    """For judge_run a perf dump is evidence of the run, not an input to refuse: the run is invalid, and the file is
    never opened for reading (a FIFO with no writer would block)."""
    special = tmp_path / "perf.json"
    _make_special(special, kind)
    run = run_script("judge_run", "--log", str(LOG), "--perf-dump", str(special), "--engine-version", "0.5.23",
                     "--json", timeout=HANG_S)
    assert run.returncode == 1 and run.document["status"] == "invalid"
    assert any(r.startswith("artifacts.no_perf_dump") for r in run.document["reasons"])


def test_every_recorded_perf_dump_takes_the_one_pass_reader():
    """The typed decoding is what keeps a reader linear: every dump a real engine wrote (0.5.10 and 0.5.23, CPU and
    H200) goes through it, not through the schema path kept for the dumps it refuses."""
    dumps = sorted(TEST_FIXTURES.glob("**/*perf*.json"))
    assert len(dumps) >= 10
    assert [d for d in dumps if perf_dump._decode_checked(d.read_text(encoding="utf-8")) is None] == []


# --- sweep specs: bounded before they are expanded --------------------------------------------------------------

SPEC_HEAD = "schema: sweep-spec.v1\npresets: {names: [tiny-flux-cpu]}\n"
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(9))


@pytest.mark.parametrize("text, code, words", [
    (SPEC_HEAD + "campaign: {threshold_pct: .inf}\n", "input.sweep_spec_unreadable", ["non-finite"]),
    (SPEC_HEAD + "overrides: [{guidance_scale: .nan}]\n", "input.sweep_spec_unreadable", ["non-finite"]),
    (SPEC_HEAD + "repeats: " + "9" * 5001 + "\n", "input.sweep_spec_unreadable", ["30 digits"]),
    (SPEC_HEAD + "x: " + "[" * 100_000 + "]" * 100_000 + "\n", "input.sweep_spec_unreadable", ["nests deeper"]),
    (SPEC_HEAD + LAUGHS, "input.sweep_spec_unreadable", ["anchors or aliases"]),
    (SPEC_HEAD + "repeats: 2\nrepeats: 3\n", "input.sweep_spec_unreadable", ["duplicate key 'repeats'"]),
    (SPEC_HEAD + "# padding\n" * 120_000, "input.sweep_spec_unreadable", ["at most 1048576"]),
    (SPEC_HEAD + "repeats: 10000000\n", "input.schema_mismatch", ["repeats"]),
    (SPEC_HEAD + "overrides: [" + ", ".join(f"{{seed: {i}}}" for i in range(1001)) + "]\n",
     "input.schema_mismatch", ["overrides"]),
    ("schema: sweep-spec.v1\npresets: {filter: {}}\nrepeats: 100\noverrides: ["
     + ", ".join(f"{{seed: {i}}}" for i in range(200)) + "]\n", "sweep.too_many_shards", ["shards", "1000"]),
])
def test_a_hostile_sweep_spec_is_refused_quickly_with_what_bound_it_broke(tmp_path, text, code, words):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    started = time.monotonic()
    run = run_main("sweep_diffusion", "plan", str(spec), "--folder", str(tmp_path / "sw"), "--json")
    assert time.monotonic() - started < 10
    assert run.returncode == 2 and run.document["error"]["code"] == code, run.document
    assert all(w in run.document["error"]["message"] for w in words), run.document["error"]["message"]
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("campaign, code", [
    ("{mode: ab, arm_b_args: \"--x 'unterminated\"}", "usage.bad_extra_args"),
    ("{mode: single, extra_args: \"--output-path /etc\"}", "usage.duplicate_flag"),
])
def test_a_plan_whose_shards_the_bench_refuses_is_not_ok(tmp_path, campaign, code):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC_HEAD + f"campaign: {campaign}\noverrides: [{{seed: 1}}, {{seed: 2}}]\n")
    run = run_main("sweep_diffusion", "plan", str(spec), "--folder", str(tmp_path / "sw"), "--json")
    assert run.returncode == 1 and run.document["ok"] is False
    assert [r["bench_refusal"]["code"] for r in run.document["shards"]] == [code, code]
    fine = tmp_path / "fine.yaml"
    fine.write_text(SPEC_HEAD + "overrides: [{seed: 1}]\n")
    run = run_main("sweep_diffusion", "plan", str(fine), "--folder", str(tmp_path / "sw"), "--json")
    assert run.returncode == 0 and run.document["shards"][0]["bench_refusal"] is None


def test_quoted_long_numbers_and_digit_rich_prompts_are_text_not_refused(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC_HEAD + "overrides: [{prompt: '" + "1" * 40 + "'}, {prompt: a 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 "
                    "6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 cat}]\n")
    assert isinstance(inputs.load_yaml(spec, "input.sweep_spec_unreadable")["overrides"][0]["prompt"], str)


@pytest.mark.parametrize("script, argv, code", [r for r in READERS if "baseline.unreadable" not in r],
                         ids=["compare_perf", "judge-log", "analyze_trace", "render_bench_report",
                              "baseline-report", "baseline-perf-dump", "sweep-spec"])
def test_a_proc_file_that_refuses_reads_is_an_input_error_not_exit_70(tmp_path, script, argv, code):
    """/proc/self/mem is a regular file by its stat, and every read of it fails (EIO): a refusal, not a crash."""
    link = tmp_path / "input.json"
    link.symlink_to("/proc/self/mem")
    for path in (str(link), "/proc/self/mem"):
        run = run_script(script, *argv(path, str(tmp_path / "no-engine")), "--json", timeout=HANG_S)
        assert _error(run) == (2, code), run.document


def test_a_gzip_bomb_trace_is_refused_before_it_fills_memory(tmp_path):
    import gzip as gzip_module

    bomb = tmp_path / "bomb.trace.json.gz"
    with gzip_module.open(bomb, "wb", compresslevel=9) as out:
        out.write(b'{"traceEvents": [' + b" " * (256 << 20) + b"]}")  # 256 MiB of blanks, a few hundred KB packed
    assert bomb.stat().st_size < 2 << 20
    run = run_script("analyze_trace", "hotspots", str(bomb), "--json", timeout=HANG_S)
    assert _error(run) == (2, "input.trace_truncated") and "gzip bomb" in run.document["error"]["message"]


def test_bounded_gunzip_reads_what_gzip_reads_and_refuses_the_rest():
    import gzip as gzip_module

    two_members = gzip_module.compress(b"abc") + gzip_module.compress(b"def")
    assert inputs.gunzip_bounded(two_members, "x", "input.unreadable") == b"abcdef"
    for broken in (two_members[:-3], b"\x1f\x8b not gzip"):
        with pytest.raises(contract.InputError) as caught:
            inputs.gunzip_bounded(broken, "x", "input.unreadable")
        assert "truncated or corrupt" in caught.value.message


@pytest.mark.torch  # the request-manifest surfaces read through the installed engine's own parser
def test_every_reader_refuses_a_sample_of_the_hostile_corpus_cleanly(monkeypatch):
    """benchmarks/hostile_inputs.py's corpus, three hostile kinds on every surface plus every hostile flag: each a
    clean refusal (no traceback, exit 70, hang, lie, leaked token or lost file); the whole corpus is the benchmark."""
    spec = importlib.util.spec_from_file_location("hostile_inputs", REPO / "benchmarks" / "hostile_inputs.py")
    hostile_inputs = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "hostile_inputs", hostile_inputs)  # its dataclasses look their module up
    spec.loader.exec_module(hostile_inputs)
    kinds = ["fifo", "proc_self_mem", "json_deep_object"]
    rows = hostile_inputs.run_all(list(hostile_inputs.SURFACES), kinds, list(hostile_inputs.FLAG_CASES))
    assert len(rows) == len(hostile_inputs.SURFACES) * len(kinds) + len(hostile_inputs.FLAG_CASES)
    bad = [r for r in rows if r["outcome"] != "refused"]
    assert not bad, bad
