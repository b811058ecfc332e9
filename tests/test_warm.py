"""Warm-engine campaigns: which requests share an engine, how a warm request is rewritten, the first-request flag,
and (marker ``engine``) a real warm A/A on the CPU engine."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SCRIPTS, run_main, run_script
from sgl_diffusion_bench.engine import engine_overlap
from sgl_diffusion_bench.campaign import engine_starts, warm_grouping
from sgl_diffusion_bench.judging.cell import Cell
from sgl_diffusion_bench.cli import _runner

BASE = ["--backend=sglang", "--model-path=/m/tiny-FLUX.1-dev", "--prompt=a cat", "--seed=42", "--width=64",
        "--quality=lossless", "--warmup-mode", "request"]


def _request(n: int, *extra: str) -> list[str]:
    return [*BASE, *extra, "--perf-dump-path", f"/o/r{n}/r{n}.perf.json", "--output-path", f"/o/r{n}",
            "--output-file-name", f"r{n}", "--master-port", str(4000 + n), "--scheduler-port", str(5000 + n)]


def test_requests_differing_only_in_per_request_options_share_an_engine():
    a, b = warm_grouping.engine_key(_request(1), None), warm_grouping.engine_key(_request(2), None)
    assert a == b
    other_seed = [t.replace("--seed=42", "--seed=7") for t in _request(3)]
    assert warm_grouping.engine_key(other_seed, None) == a  # the seed is a request option
    bcg = warm_grouping.engine_key(_request(4, "--enable-breakable-cuda-graph", "--warmup-resolutions", "64x64"), None)
    assert bcg != a  # an engine flag: eager and BCG never share an engine
    quality = [t.replace("--quality=lossless", "--quality=high") for t in _request(5)]
    assert warm_grouping.engine_key(quality, None) != a


def test_a_config_file_counts_by_content_not_path():
    one = warm_grouping.engine_key([*_request(1), "--config=/o/r1/c.json"], '{"a": 1}')
    two = warm_grouping.engine_key([*_request(2), "--config=/o/r2/c.json"], '{"a": 1}')
    assert one == two != warm_grouping.engine_key([*_request(2), "--config=/o/r2/c.json"], '{"a": 2}')


# What 0.5.23's SamplingParams.add_cli_args adds (a part): the probe's request_flags.
REQUEST_FLAGS = frozenset({"--perf-dump-path", "--output-file-path", "--prompt", "--seed", "--width", "--height",
                           "--num-inference-steps", "--guidance-scale", "--quality", "--save-output",
                           "--use-diffusion-decoder"})


def _arm(n: int, *flags: str, config: str | None = None, env: tuple[str, ...] = ()):
    args = [*_request(n), *flags, *(["--config=/o/c.json"] if config is not None else [])]
    return warm_grouping.engine_key(args, config, REQUEST_FLAGS, env)


def test_arms_differing_only_in_what_the_engine_takes_per_request_share_an_engine():
    keys = [_arm(1), _arm(2, "--num-inference-steps=4"), _arm(3, "--guidance-scale", "2.0"),
            _arm(4, "--width=128", "--height=128"), _arm(5, "--enable-breakable-cuda-graph"), _arm(6),
            _arm(7, "--use-diffusion-decoder"), _arm(8, env=("env X=1",))]
    # steps, guidance and size share engine 0; BCG (an engine flag), the decoder (generate copies it into the
    # server args) and a changed environment each need their own engine
    assert warm_grouping.group_by_engine(keys) == [0, 0, 0, 0, 1, 0, 2, 3]
    # where the probe cannot list the request flags, only paths, ports, seed and prompt are per request
    unknown = [warm_grouping.engine_key([*_request(1), "--num-inference-steps=4"], None, None),
               warm_grouping.engine_key(_request(2), None, None)]
    assert warm_grouping.group_by_engine(unknown) == [0, 1]


def test_a_config_file_splits_into_engine_keys_and_request_keys():
    base = json.dumps({"num_inference_steps": 2, "dit_precision": "bf16"})
    more_steps = json.dumps({"num_inference_steps": 8, "dit_precision": "bf16"})
    other_engine = json.dumps({"num_inference_steps": 2, "dit_precision": "fp32"})
    assert warm_grouping.group_by_engine([_arm(1, config=base), _arm(2, config=more_steps),
                                          _arm(3, config=other_engine), _arm(4, config="not json")]) == [0, 0, 1, 2]
    requests = [warm_grouping.request_key([*_request(n), "--config=/o/c.json"], c, REQUEST_FLAGS)
                for n, c in ((1, base), (2, base), (3, more_steps))]
    assert requests[0] == requests[1] != requests[2]  # where a request writes is not what it asks for


def test_a_warm_request_is_gated_at_the_level_it_runs_not_the_arms_label():
    """A BCG request on 0.5.23 whose arm carries no quality label still runs at the pinned default (lossless),
    where a fusion mounted after capture invalidates it: the gate must know the level."""
    from sgl_diffusion_bench.judging import engine_args, log_markers

    markers = log_markers.markers_for_version("0.5.23")
    argv = [*_request(1), "--enable-breakable-cuda-graph"]
    mount = "[12-01 10:00:00] Mounted fused_qk_norm for quality=lossless"

    def late_fusion(quality):
        gate = engine_args.log_gate(markers, argv, quality=quality, require_native=False, prior_captures=2)
        gate.feed(mount)
        return [r.code for r in gate.verdict().reasons] == ["bcg.late_fusion_mount"]

    assert late_fusion("lossless") and not late_fusion(None)  # the arm's label (None) would have missed it
    with pytest.raises(TypeError):  # no default taken from the arm: every caller names the level
        engine_args.log_gate(markers, argv, require_native=False)


def test_warmup_requests_write_elsewhere_and_keep_every_other_token():
    args = warm_grouping.with_request_paths(_request(1), Path("/w/warmup.perf.json"), Path("/w"), "warmup")
    assert args[args.index("--perf-dump-path") + 1] == "/w/warmup.perf.json"
    assert args[args.index("--output-path") + 1] == "/w" and args[args.index("--output-file-name") + 1] == "warmup"
    untouched = [t for t in _request(1) if not t.startswith("/o/") and t != "r1"]
    assert [t for t in args if not t.startswith("/w") and t != "warmup"] == untouched
    configured = warm_grouping.with_request_paths([*_request(1), "--config=/o/r1/c.json"], Path("/w/warmup.perf.json"),
                                                  Path("/w"), "warmup", Path("/w/c.json"))
    assert configured[-1] == "--config=/w/c.json"  # the cell's run directory does not exist yet


def _cell(index, engine, first, value, arm="a"):
    return Cell(index=index, arm=arm, status="valid", perf={"e2e_ms": value},
                engine={"id": engine, "first_measured": first, "recaptures": 0})


def test_the_first_measured_request_is_compared_with_the_rest_of_its_engine():
    slow_first = [_cell(0, "e1", True, 130.0), _cell(1, "e1", False, 100.0), _cell(2, "e1", False, 101.0),
                  _cell(3, "e1", False, 99.0)]
    row, = engine_starts.first_measured_effect(slow_first, "e2e_ms", 1.5)
    assert row["differs"] and row["deviation_pct"] == pytest.approx(30.0) and row["others_median"] == 100.0
    like_the_rest = [_cell(0, "e1", True, 100.5), *slow_first[1:]]
    assert engine_starts.first_measured_effect(like_the_rest, "e2e_ms", 1.5)[0]["differs"] is False
    # another arm on the same engine (more steps) is not what the first request is compared with
    shared = [*like_the_rest, _cell(4, "e1", False, 200.0, arm="b"), _cell(5, "e1", False, 201.0, arm="b")]
    row, = engine_starts.first_measured_effect(shared, "e2e_ms", 1.5)
    assert row["others_median"] == 100.0 and row["differs"] is False


GIB = 1024 ** 3


@pytest.mark.parametrize("mode, engines, schedule, on_gpu, first, free, overlapped, reason", [
    ("auto", 2, "auto", True, 26 * GIB, 113 * GIB, True, "fit beside the first: need 52.00 GiB"),
    ("auto", 2, "auto", True, 26 * GIB, 40 * GIB, False, "not enough free memory for 2 engines at once: need "
                                                         "52.00 GiB (2 x the first engine's 26.00 GiB after load), "
                                                         "free 40.00 GiB"),
    ("auto", 2, "auto", False, 1 * GIB, 20 * GIB, False, "CPU: engines loading side by side"),
    ("on", 2, "auto", False, 1 * GIB, 20 * GIB, True, "fit beside the first"),
    ("on", 2, "interleaved", False, 1 * GIB, 20 * GIB, True, "fit beside the first"),
    ("on", 2, "alternating_blocks", True, 1 * GIB, 20 * GIB, False, "--warm-schedule alternating_blocks"),
    ("off", 2, "auto", True, 1 * GIB, 100 * GIB, False, "--engine-overlap off"),
    ("on", 1, "auto", True, 1 * GIB, 100 * GIB, False, "one engine configuration"),
    ("on", 2, "auto", True, None, 100 * GIB, False, "memory could not be measured"),
    ("on", 2, "auto", True, 1 * GIB, None, False, "memory could not be measured"),
    ("on", 3, "auto", True, 10 * GIB, 39 * GIB, False, "need 40.00 GiB"),  # two others, twice the first each
])
def test_the_overlap_decision_and_its_reason(mode, engines, schedule, on_gpu, first, free, overlapped, reason):
    doc = engine_overlap.decide(mode, engines=engines, schedule=schedule, on_gpu=on_gpu, first_bytes=first,
                                available_bytes=free)
    assert doc["overlapped"] is overlapped and reason in doc["reason"], doc
    assert doc["mode"] == mode and doc["memory_kind"] == ("device" if on_gpu else "process_rss")


@pytest.mark.parametrize("mode, engines, schedule, on_gpu, weights, free, launched", [
    ("auto", 2, "auto", True, 23 * GIB, 139 * GIB, True),  # the H200: 2 x 1.5 x 23 GiB = 69 GiB of 139 GiB free
    ("auto", 2, "auto", True, 23 * GIB, 68 * GIB, False),  # not by the weights: wait for the first engine's load
    ("auto", 2, "auto", False, 1 * GIB, 20 * GIB, False),  # auto never launches together on CPU
    ("early", 2, "auto", False, 1 * GIB, 20 * GIB, True),
    ("early", 2, "interleaved", True, 1 * GIB, 20 * GIB, True),
    ("early", 2, "alternating_blocks", True, 1 * GIB, 20 * GIB, False),
    ("on", 2, "auto", True, 1 * GIB, 100 * GIB, False),  # on: beside the first's warm-up, never before its load
    ("off", 2, "auto", True, 1 * GIB, 100 * GIB, False),
    ("early", 1, "auto", True, 1 * GIB, 100 * GIB, False),
    ("early", 2, "auto", True, None, 100 * GIB, False),  # a hub id: no weights on disk to size by
    ("early", 2, "auto", True, 1 * GIB, None, False),
    ("early", 3, "auto", True, 10 * GIB, 44 * GIB, False),  # 3 x 1.5 x 10 GiB = 45 GiB
])
def test_launching_every_engine_together_is_sized_by_the_weights_on_disk(mode, engines, schedule, on_gpu, weights,
                                                                        free, launched):
    doc = engine_overlap.decide_at_launch(mode, engines=engines, schedule=schedule, on_gpu=on_gpu,
                                          weights_bytes=weights, available_bytes=free)
    assert (doc is not None) is launched, doc
    if launched:
        assert doc["overlapped"] and doc["when"] == "at_launch" and doc["weights_bytes"] == weights
        assert doc["needed_bytes"] == int(weights * engines * 1.5) <= free and "launched together" in doc["reason"]
        assert doc["memory_kind"] == ("device" if on_gpu else "process_rss")


def test_the_weights_on_disk_are_the_weight_files_of_the_model_folder(tmp_path):
    model = tmp_path / "FLUX.1-dev"
    (model / "transformer").mkdir(parents=True)
    (model / "transformer" / "a.safetensors").write_bytes(b"x" * 3000)
    (model / "vae.bin").write_bytes(b"x" * 500)
    (model / "model_index.json").write_text("{}")  # not a weight file
    assert engine_overlap.weights_on_disk(str(model)) == 3500
    assert engine_overlap.weights_on_disk("black-forest-labs/FLUX.1-dev") is None  # a hub id
    (tmp_path / "empty").mkdir()
    assert engine_overlap.weights_on_disk(str(tmp_path / "empty")) is None
    assert engine_overlap.weights_on_disk(None) is None
    assert engine_overlap.model_path_of(["x", "--model-path=/m", "--seed=1"]) == "/m"
    assert engine_overlap.model_path_of(["--model-path", "/n"]) == "/n"
    assert engine_overlap.model_path_of(["--x"]) is None


def test_engine_spans_that_cross_overlap_and_spans_that_touch_do_not():
    spans = {"e1": (0.0, 10.0), "e2": (4.0, 12.0), "e3": (12.0, 20.0)}
    assert engine_overlap.overlapping(spans) == {"e1": ["e2"], "e2": ["e1"], "e3": []}
    starts = [{"id": "e1", "overlapped_with": ["e2"], "load_s": 5.0, "warmup_s": 7.25},
              {"id": "e2", "overlapped_with": ["e1"], "load_s": 6.5, "warmup_s": 1.0}]
    engines = {"overlap": {"reason": "they fit"}, "starts": starts, "grouping": {"engine_configurations": 2}}
    assert engine_overlap.summary_line(engines) == (
        "- Engine overlap: e1 with e2 started side by side (they fit); measured from each engine's own log: e1 load "
        "5.0 s + warm-up 7.2 s; e2 load 6.5 s + warm-up 1.0 s. No measured request ran while an engine was loading.")
    alone = {**engines, "starts": [{**s, "overlapped_with": []} for s in starts], "overlap": {"reason": "--x"}}
    assert engine_overlap.summary_line(alone) == "- Engine overlap: none (--x)."
    assert engine_overlap.summary_line({**engines, "grouping": {"engine_configurations": 1}}) is None
    assert engine_overlap.summary_line({"starts": starts}) is None  # a report made before the decision existed


CLI_MODULES = ["bench", "cache", "compare", "env", "profile", "report", "trace"]


@pytest.mark.parametrize("name", CLI_MODULES)
def test_no_cli_takes_an_option_prefix(name):
    parsers = list(_all_parsers(importlib.import_module(f"sgl_diffusion_bench.cli.{name}").build_parser()))
    assert parsers and all(p.allow_abbrev is False for p in parsers)


def _all_parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


def test_a_prefix_is_refused_not_taken_for_a_longer_option():
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--engine-cap", "recent", "--dry-run",
                     "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.invalid_arguments"
    parsed = importlib.import_module("sgl_diffusion_bench.cli.bench").build_parser().parse_args(["--engine", "warm"])
    assert parsed.engine == "warm" and parsed.engine_capabilities == "installed"
    assert isinstance(_runner.new_parser("x", "y"), _runner.Parser)


@pytest.mark.engine
def test_a_warm_aa_campaign_uses_one_engine_and_judges_every_request(tmp_path):
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "aa", "--rounds", "1",
                     "--engine", "warm", "--label", "warm", "--output-dir", str(tmp_path), "--json", timeout=1800)
    doc = run.document
    assert run.returncode == 0 and doc["ok"], run.stderr[-3000:]
    engines = doc["engines"]
    assert engines["mode"] == "warm" and engines["engine_starts"] == 1 and engines["schedule"] == "interleaved"
    start, = engines["starts"]
    assert start["arms"] == ["a", "a-again"] and start["measured_requests"] == 4 and start["warmup_requests"] == 1
    assert start["load_s"] > 0 and start["status"] == "closed"
    cells = doc["cells"]
    assert [c["status"] for c in cells] == ["valid"] * 4
    assert [c["engine"]["first_measured"] for c in cells] == [True, False, False, False]
    assert len({o["sha256"] for c in cells for o in c["outputs"]}) == 1
    assert engines["first_measured"][0]["cell"] == 0
    # each request's log is its own segment: the loading lines are in the engine's log only
    first_log = Path(cells[0]["log_path"]).read_text()
    assert "sgl-diffusion version" not in first_log and "Metrics dumped to" in first_log
    assert "sgl-diffusion version" in Path(start["log_path"]).read_text()
    warmup = Path(start["log_path"]).parent / "warmup1"
    assert (warmup / "warmup.perf.json").is_file() and json.loads((warmup / "warmup.perf.json").read_text())
    assert "[engine e1] ready after" in run.stderr


@pytest.mark.engine
def test_arms_that_differ_only_in_steps_share_one_engine_start(tmp_path):
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "ab", "--rounds", "1",
                     "--arm-b-args=--num-inference-steps 3", "--engine", "warm", "--label", "steps", "--output-dir",
                     str(tmp_path), "--json", timeout=1800)
    doc = run.document
    engines = doc["engines"]
    assert engines["engine_starts"] == 1 and engines["grouping"]["engine_configurations"] == 1, run.stderr[-3000:]
    assert engines["grouping"]["request_flags_source"] == "argparse"  # the engine's own per-request flags
    start, = engines["starts"]
    assert start["arms"] == ["a", "b"] and start["warmup_requests"] == 2  # each distinct request warmed once
    steps = [(c["arm"], len(json.loads(Path(c["perf_dump_path"]).read_text())["denoise_steps_ms"]))
             for c in doc["cells"]]
    assert steps == [("a", 2), ("b", 3), ("b", 3), ("a", 2)]  # each request ran its own steps on the one engine
    # other steps, other bytes: at lossless that is never evidence of a speedup, so arm B's cells do not count
    assert [c["status"] for c in doc["cells"]] == ["valid", "invalid", "invalid", "valid"] and run.returncode == 1
    assert all(c["reasons"][0].startswith("output.differs") for c in doc["cells"] if c["arm"] == "b")


@pytest.mark.engine
def test_a_config_file_preset_on_engines_that_alternate_in_blocks(tmp_path):
    """Engine flags differ (arm B adds --log-level info), the schedule is alternating blocks: A1 on e1, B1 B2 on e2,
    A2 on a restarted e3; each request writes its own copy of the preset's config file and the report says so."""
    from sgl_diffusion_bench import presets
    from sgl_diffusion_bench.engine import engine_probe, tiny_model
    from sgl_diffusion_bench.campaign import bench_runner, design
    from sgl_diffusion_bench.results import report
    from sgl_diffusion_bench.campaign.campaign_context import CampaignContext, CampaignSettings, Site

    preset = dataclasses.replace(presets.get_preset("tiny-flux-cpu"), config_overrides={"guidance_scale": 3.5})
    settings = CampaignSettings(label="blocks", output_root=tmp_path, engine_mode="warm",
                                warm_schedule="alternating_blocks")
    model_path = str(tiny_model.ensure_local_model())
    ctx = CampaignContext.build(preset, design.plan("ab", rounds=1, arm_b_args=["--log-level", "info"]), settings,
                                engine_probe.probe_engine().capabilities, model_path=model_path,
                                site=Site(use_cpu_adapter=True))
    runner = bench_runner.CampaignRunner(ctx, asset_filenames={})
    doc = runner.run()
    assert doc["ok"] and [c["status"] for c in doc["cells"]] == ["valid"] * 4, [c["reasons"] for c in doc["cells"]]
    engines = doc["engines"]
    assert engines["schedule"] == "alternating_blocks" and engines["engine_starts"] == 3
    assert [(r["position"], r["engine"]) for r in engines["order"]] == [("A1", "e1"), ("B1", "e2"), ("B2", "e2"),
                                                                        ("A2", "e3")]
    assert [s["arms"] for s in engines["starts"]] == [["a"], ["b"], ["a"]]
    for inv in runner.invocations:  # each request's config file, as a cold cell would have it
        assert json.loads(inv.config_path.read_text()) == {"guidance_scale": 3.5}
    assert "schedule alternating blocks; requests in order: A1 on e1, B1 on e2, B2 on e2, A2 on e3" in \
        report.render_markdown(doc)


# -- samples and the sequential rule ------------------------------------------------------------------------------

def test_samples_repeat_each_slot_with_distinct_files(tmp_path):
    from sgl_diffusion_bench.campaign import design

    plan = design.plan("abba", rounds=1, samples=3)
    assert [(s.position, s.sample) for s in plan.slots[:4]] == [("A1", 1), ("A1", 2), ("A1", 3), ("B1", 1)]
    assert len(plan.slots) == 12 and len(plan.to_json()["order"]) == 4
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "aa", "--rounds", "1",
                     "--samples", "2", "--engine-capabilities", "recent", "--label", "s", "--output-dir",
                     str(tmp_path), "--dry-run", "--json")
    run_ids = [r["run_id"] for r in run.document["runs"]]
    assert len(run_ids) == 8 == len(set(run_ids)) and run_ids[0].endswith("r01p01s01")


def _round_cells(changes_pct, noise=(0.0, 0.0)):
    cells = []
    for r, change in enumerate(changes_pct, start=1):
        changed = 100.0 * (1 + change / 100)
        for arm, value in (("A", 100.0 + noise[0]), ("B", changed), ("B", changed), ("A", 100.0 - noise[0])):
            cells.append(Cell(index=len(cells), arm=arm, round=r, status="valid", perf={"e2e_ms": value}))
    return cells


def test_the_sequential_rule_stops_on_a_clear_change_and_on_equivalence_only():
    from sgl_diffusion_bench.campaign import sequential

    assert sequential.t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert sequential.t_quantile(0.975, 10) == pytest.approx(2.228, abs=1e-3)
    rule = sequential.StoppingRule(1.5, budget_rounds=6)
    assert rule.looks == 5 and rule.look_confidence == pytest.approx(0.998)
    faster = sequential.look(rule, _round_cells([-5.0, -5.2, -4.9, -5.1]), "A", "B", 4)
    assert faster["verdict"] == "improved" and faster["stop"] == "verdict" and faster["ci_high_pct"] < -1.5
    same = sequential.look(rule, _round_cells([0.1, -0.1, 0.05, 0.0]), "A", "B", 4)
    assert same["stop"] == "equivalent" and same["verdict"] == "no_significant_change"
    unsure = sequential.look(rule, _round_cells([-3.0, 1.0]), "A", "B", 2)
    assert unsure["stop"] is None and unsure["verdict"] == "insufficient_data"  # unknown is not "no change"
    spent = sequential.look(rule, _round_cells([-3.0, 1.0, -2.0, 0.5, -4.0, 2.0]), "A", "B", 6)
    assert spent["stop"] == "budget" and spent["verdict"] == "insufficient_data"
    assert spent["ci_low_pct"] < -1.5 < 1.5 < spent["ci_high_pct"] or spent["ci_low_pct"] < 1.5 < spent["ci_high_pct"]
    mixed = sequential.look(rule, _round_cells([-5.0, -5.0, -5.0, 0.5]), "A", "B", 4)
    assert mixed["verdict"] != "improved"  # a round that disagrees blocks a verdict
    with pytest.raises(Exception, match="budget"):
        sequential.StoppingRule(1.5, budget_rounds=1)


def test_the_sequential_rule_gives_no_verdict_on_a_noisy_host_and_no_unreachable_advice():
    """Issue 24's busy 2-core host: CV ~100 %, budget spent. The old rule said 'no_significant_change' and asked for
    --rounds 13955 (the CLI refuses above 50). Now: insufficient_data, and the advice is to quiet the host."""
    from sgl_diffusion_bench import advice
    from sgl_diffusion_bench.campaign import sequential
    from sgl_diffusion_bench.results import sample_size

    def next_step(rule, final):
        return advice.render(sequential.advice_for(rule, final), advice.BENCH)

    rule = sequential.StoppingRule(1.5, budget_rounds=4)
    cells = _round_cells([-40.0, 90.0, -60.0, 30.0], noise=(80.0, 0.0))
    final = sequential.look(rule, cells, "A", "B", 4)
    assert final["verdict"] == "insufficient_data" and final["stop"] == "budget"
    assert final["cv_pct"] > sample_size.MAX_CV_PCT and final["reason"].startswith("unstable:")
    step = next_step(rule, final)
    assert step.startswith("this host is too noisy for a 1.5% threshold") and "--budget-rounds" not in step
    # a tight A/A passes every gate but the CV gate: 'equivalent' would be a claim the spread does not support
    gated = sequential.look(rule, _round_cells([0.1, -0.1, 0.0, 0.05], noise=(20.0, 0.0)), "A", "B", 4)
    assert gated["verdict"] == "insufficient_data" and gated["stop"] == "budget"
    # a quiet host whose rounds still straddle the band: advice is a budget the CLI accepts, at today's spread
    quiet = sequential.look(rule, _round_cells([-2.0, 0.5, -1.0, 1.0]), "A", "B", 4)
    assert quiet["verdict"] == "insufficient_data" and quiet["cv_pct"] < sample_size.MAX_CV_PCT
    needed = sequential.rounds_needed(rule, quiet["round_change_sd_pct"])
    assert needed is not None and 4 < needed <= advice.MAX_ROUNDS
    assert next_step(rule, quiet).startswith(f"re-run with --until-verdict --budget-rounds {needed}:")
    assert sequential.rounds_needed(rule, 50.0) is None  # sd 50 %: not within 50 rounds
    assert "too noisy" in next_step(rule, {**quiet, "round_change_sd_pct": 50.0})
    faster = sequential.look(rule, _round_cells([-5.0, -5.2, -4.9, -5.1]), "A", "B", 4)
    assert faster["verdict"] == "improved" and next_step(rule, faster) is None


def test_budget_rounds_above_the_campaign_limit_is_refused_by_the_parser(tmp_path):
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "aa", "--until-verdict",
                     "--budget-rounds", "51", "--engine-capabilities", "recent", "--label", "u", "--output-dir",
                     str(tmp_path), "--dry-run", "--json")
    assert run.returncode == 2 and "--budget-rounds" in run.document["error"]["message"]


@pytest.mark.parametrize("args", [["--campaign", "matrix"], []])
def test_until_verdict_needs_one_ab_comparison(args, tmp_path):
    run = run_main("bench_diffusion_denoise", "--model", "tiny-flux-cpu", *args, "--until-verdict",
                     "--engine-capabilities", "recent", "--label", "u", "--output-dir", str(tmp_path), "--dry-run",
                     "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "usage.until_verdict_needs_ab"


REFUSALS = [
    (["--campaign", "ab"], 2, "usage.ab_needs_arms"),
    (["--engine", "warm", "--warmup-requests", "0"], 2, "usage.bad_warmup_requests"),
    (["--label", "taken"], 3, "run.label_taken"),
]


@pytest.mark.parametrize("args, exit_code, code", REFUSALS)
def test_a_refused_run_imports_no_torch_and_builds_nothing(args, exit_code, code, tmp_path):
    """Refusals come before anything heavy: the refused process never imported torch nor built a model."""
    (tmp_path / "tiny-flux-cpu__taken").mkdir()
    probe = ("import json, sys; sys.path.insert(0, sys.argv[1]); from sgl_diffusion_bench.cli import bench; "
             "rc = bench.main(sys.argv[2:]); print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules}))")
    proc = subprocess.run([sys.executable, "-c", probe, str(SCRIPTS), "--model", "tiny-flux-cpu",
                           "--engine-capabilities", "recent", "--label", "refused", "--output-dir", str(tmp_path),
                           *args, "--json"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DIFFUSION_BENCH_TINY_MODEL_DIR": str(tmp_path / "models")})
    error, end = json.JSONDecoder().raw_decode(proc.stdout)
    outcome = json.loads(proc.stdout[end:])
    assert error["error"]["code"] == code and outcome == {"rc": exit_code, "torch": False}, proc.stderr[-2000:]
    assert not (tmp_path / "models").exists()


def test_the_replay_script_changes_one_thing_at_a_time_and_ends_uncaptured():
    from sgl_diffusion_bench import presets
    from sgl_diffusion_bench.campaign import bcg_replay

    preset = presets.get_preset("tiny-flux-cpu")
    steps = bcg_replay.script(preset)
    first, prompt, seed, repeat, other = steps
    assert (prompt.prompt != first.prompt, prompt.seed) == (True, first.seed)
    assert (seed.seed, seed.prompt) == (first.seed + 1, first.prompt)
    assert (repeat.prompt, repeat.seed, repeat.width) == (first.prompt, first.seed, first.width)
    assert not other.captured_shape and (other.width, other.height) != (first.width, first.height)
    assert other.width % 16 == 0 and all(s.captured_shape for s in steps[:4])
    args = bcg_replay.request_args(["--prompt=x", "--seed=1", "--width=64", "--output-path", "/o"], other, Path("/r"))
    assert f"--width={other.width}" in args and "--output-path=/r" in args and "/o" not in args


@pytest.mark.engine
def test_the_replay_sequence_on_the_real_engine_without_bcg(tmp_path):
    run = run_script("bench_diffusion_denoise", "--bcg-replay", "--replay-without-bcg", "--model", "tiny-flux-cpu",
                     "--label", "replay", "--output-dir", str(tmp_path), "--json", timeout=1800)
    doc = run.document
    assert run.returncode == 0 and doc["ok"] and doc["bcg"] is False, (doc.get("problems"), run.stderr[-2000:])
    assert [p["identical"] for p in doc["pairs"]] == [True] * 5
    hashes = [p["eager_sha256"] for p in doc["pairs"]]
    assert hashes[0] == hashes[3] and len({hashes[0], hashes[1], hashes[2], hashes[4]}) == 4  # repeat equal, rest new
    for engine in doc["engines"].values():
        assert engine["captured_at_warmup"] == 0
        assert all(r["status"] == "ok" and r["recaptures"] == 0 and not r["fell_back"]
                   for r in engine["requests"].values())


# -- which engine mode runs ----------------------------------------------------------------------------------------

def test_warm_is_the_default_runs_cold_where_it_cannot_and_is_refused_there_when_asked():
    from sgl_diffusion_bench import contract
    from sgl_diffusion_bench.engine import capabilities
    from sgl_diffusion_bench.campaign import engine_mode

    recent = capabilities.recent_engine_capabilities()
    plain, profiled = [_request(1)], [[*_request(1), "--profile"], _request(2)]
    assert engine_mode.choose(None, recent, plain) == {"asked": None, "mode": "warm", "reason": "the default (warm)"}
    assert engine_mode.choose("warm", recent, plain) == {"asked": "warm", "mode": "warm", "reason": "--engine warm"}
    assert engine_mode.choose("cold", recent, plain) == {"asked": "cold", "mode": "cold", "reason": "--engine cold"}
    assert engine_mode.choose("cold", recent, profiled)["mode"] == "cold"
    for engine, argvs, why in ((recent, profiled, "torch profiler"),
                               (dataclasses.replace(recent, warm_entry=False), plain, "DiffGenerator"),
                               (dataclasses.replace(recent, warm_entry=None), plain, "do not say")):
        with pytest.raises(contract.PreconditionError) as refused:
            engine_mode.choose("warm", engine, argvs)
        assert refused.value.code == "engine.warm_unavailable" and why in refused.value.message
        fallback = engine_mode.choose(None, engine, argvs)  # the default says why it runs cold
        assert fallback["mode"] == "cold" and fallback["reason"].startswith("the default (warm) cannot run: ")
        assert why in fallback["reason"]


def test_the_plan_names_each_presets_engine_mode(tmp_path):
    common = ["--model", "tiny-flux-cpu", "--engine-capabilities", "recent", "--label", "m", "--output-dir",
              str(tmp_path), "--dry-run", "--json"]
    warm = run_main("bench_diffusion_denoise", *common, "--engine", "warm")
    assert warm.returncode == 0 and warm.document["engine_modes"] == [
        {"preset": "tiny-flux-cpu", "asked": "warm", "mode": "warm", "reason": "--engine warm"}]
    refused = run_main("bench_diffusion_denoise", *common, "--extra-args=--profile", "--engine", "warm")
    assert refused.returncode == 3 and refused.document["refusals"][0]["code"] == "engine.warm_unavailable"
    default = run_main("bench_diffusion_denoise", *common, "--extra-args=--profile")  # the default falls back
    (mode,) = default.document["engine_modes"]
    assert default.returncode == 0 and mode["mode"] == "cold" and "torch profiler" in mode["reason"]
