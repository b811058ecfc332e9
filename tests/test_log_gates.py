"""The log gate on real engine logs (H200 and CPU runs of sglang 0.5.10.post1) and on hand-written logs built from the
references' exact strings for what 0.5.10.post1 cannot print (BCG, late fusion, failures)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from conftest import REPO, TEST_FIXTURES
from sgl_diffusion_bench import contract, datafile
from sgl_diffusion_bench.judging import log_gates, log_markers

H200 = TEST_FIXTURES / "sglang-0.5.10-h200"
CPU = TEST_FIXTURES / "engine-cpu-0.5.10"
LOGS = TEST_FIXTURES / "logs"
# The upstream skill's fallback substrings, written out here so the test does not reuse the data file's patterns.
FALLBACK_SUBSTRINGS = ("falling back to diffusers backend", "using diffusers backend", "loaded diffusers pipeline")
CATALOG = log_markers.load_catalog()
V0510 = CATALOG.for_release("0.5.10.post1")
V0523 = CATALOG.for_release("0.5.23")
MAIN = CATALOG.for_release("main")


def verdict_validator() -> Draft202012Validator:
    registry = Registry().with_resources(
        (contract.SCHEMA_BASE_URI + f"{sid}.schema.json", Resource.from_contents(contract.load_schema(sid)))
        for sid in ("common.v1", "log-markers.v1"))
    return Draft202012Validator({"$ref": contract.SCHEMA_BASE_URI + "log-markers.v1.schema.json#/$defs/gate_verdict"},
                                registry=registry)


VERDICT = verdict_validator()


def checked(verdict: log_gates.GateVerdict) -> log_gates.GateVerdict:
    document = verdict.to_json()
    errors = [e.message for e in VERDICT.iter_errors(json.loads(json.dumps(document)))]
    assert not errors, errors
    assert document["valid"] == (not document["reasons"])
    return verdict


def scan(path: Path, markers: log_markers.MarkerSet, **kwargs) -> log_gates.GateVerdict:
    return checked(log_gates.scan_log(path.read_text(encoding="utf-8"), markers, **kwargs))


def codes(verdict: log_gates.GateVerdict) -> set[str]:
    return set(verdict.reason_codes())


def warning_codes(verdict: log_gates.GateVerdict) -> set[str]:
    return {code for code, _ in verdict.warnings}


# --- the data file and the release it applies to ---------------------------------------------------------------

def test_every_marker_example_matches_its_pattern_and_only_bcg_sets_have_bcg_markers():
    assert len(CATALOG.markers) >= 40
    for marker in CATALOG.markers:
        qualities = CATALOG.late_fusion_qualities if marker.kind == "late_fusion" else (None,)
        assert any(marker.compiled(q).search(marker.example) for q in qualities), marker.id
        # the gate skips a marker's regex unless this literal is on the line: it must be on the example's line
        assert any(log_markers.required_literal(marker.compiled(q)) in marker.example.lower() for q in qualities)
    assert not [m.id for m in V0510.markers if m.kind.startswith("bcg") or m.kind == "late_fusion"]
    assert {"bcg_captured", "bcg_signature_missed", "late_quality_fusion_mount"} <= {m.id for m in V0523.markers}
    legacy = {"bcg_disabled", "bcg_incompatible_option"}
    assert not legacy & {m.id for m in V0523.markers} and legacy <= {m.id for m in MAIN.markers}
    assert not V0510.release.bcg_supported and V0523.release.bcg_supported


@pytest.mark.parametrize("version, release, guessed", [
    ("0.5.10.post1", "0.5.10.post1", False),
    ("0.5.23", "0.5.23", False),
    ("0.5.23.0", "0.5.23", False),           # PEP 440 equal
    ("main", "main", False),
    ("0.5.15", "0.5.23", True),              # between releases: the newer set (more markers, none missed)
    ("0.5.4", "0.5.10.post1", True),
    ("0.5.24.dev3+g1234abc", "main", True),  # unknown newer: newest set plus a warning
    ("0.6.0", "main", True),
    ("not-a-version", "main", True),
    ("9" * 5000, "main", True),              # past int()'s digit limit: a guess with a warning, not exit 70
    (None, "main", True),
])
def test_version_selects_a_release_and_warns_when_it_guessed(version, release, guessed):
    chosen = CATALOG.for_version(version)
    assert chosen.release.id == release
    assert bool(chosen.selection_warnings) == guessed
    verdict = log_gates.RequestLogGate(chosen, bcg_expected=False).verdict()
    assert ("log_markers.release_guessed" in warning_codes(verdict)) == guessed


def _catalog_with(mutate) -> dict:
    document = yaml.safe_load(log_markers.MARKERS_PATH.read_text(encoding="utf-8"))
    mutate(document)
    return document


def _marker(document: dict, marker_id: str) -> dict:
    return next(m for m in document["markers"] if m["id"] == marker_id)


@pytest.mark.parametrize("mutate, code, words", [
    (lambda d: _marker(d, "bcg_captured").update(kind="bcg_grabbed"), datafile.DATA_FILE_INVALID,
     ["bcg_captured", "kind"]),
    (lambda d: _marker(d, "generation_failed").update(example="all fine"), "log_markers.invalid",
     ["generation_failed", "example"]),
    (lambda d: _marker(d, "stage_error").update(regex="([unclosed"), "log_markers.invalid", ["stage_error", "regex"]),
    (lambda d: _marker(d, "bcg_captured").update(since="0.5.99"), "log_markers.invalid",
     ["bcg_captured", "0.5.99"]),
    (lambda d: _marker(d, "bcg_captured").update(until="0.5.10.post1"), "log_markers.invalid",
     ["bcg_captured", "until", "0.5.10.post1"]),
    (lambda d: _marker(d, "oom_detected").update(also_in=["main"]), "log_markers.invalid",
     ["oom_detected", "also_in"]),
    (lambda d: _marker(d, "generated_n_outputs").update(also_in=["0.5.10.post1"]), "log_markers.invalid",
     ["generated_n_outputs", "also_in"]),
    (lambda d: _marker(d, "output_saved").update(substring="x"), datafile.DATA_FILE_INVALID, ["output_saved"]),
    (lambda d: d["markers"].append(dict(_marker(d, "oom_detected"))), "log_markers.invalid",
     ["oom_detected", "duplicate"]),
    (lambda d: d["releases"].reverse(), "log_markers.invalid", ["releases"]),
    (lambda d: d["quality_models"].reverse(), "log_markers.invalid", ["quality_models", "recognised_by"]),
    (lambda d: d["quality_models"][0]["aliases"].update({"max": "ultra"}), "log_markers.invalid",
     ["quality_models[0].aliases", "ultra"]),
    (lambda d: d["quality_models"][1]["semantics"].update({"high": "roughly"}), datafile.DATA_FILE_INVALID,
     ["quality_models"]),
    (lambda d: _marker(d, "oom_detected").update(substring="OOM for quality={quality}",
                                                 example="OOM for quality=high"), "log_markers.invalid",
     ["oom_detected", "{quality}"]),
])
def test_a_bad_markers_file_is_an_input_error_naming_the_entry_and_field(tmp_path, mutate, code, words):
    path = tmp_path / "log_markers.yaml"
    path.write_text(yaml.safe_dump(_catalog_with(mutate)))
    with pytest.raises(contract.InputError) as caught:
        log_markers.load_catalog(path)
    assert caught.value.code == code and caught.value.exit_code == contract.ExitCode.USAGE
    for word in words:
        assert word in caught.value.message


def test_a_made_up_release_is_one_edit_of_the_markers_file(tmp_path):
    """What a routine engine release costs: one entry under releases, since/until on the markers it adds or drops,
    all in data/log_markers.yaml. Nothing else is read to select or apply a release's markers."""
    def add_release(document: dict) -> None:
        document["releases"].insert(2, {"id": "0.5.30", "version": "0.5.30", "bcg_supported": True,
                                        "notes": "made up: prints a new ready line, drops the cold-run warning"})
        _marker(document, "warmup_failed_ran_cold")["until"] = "0.5.30"
        document["markers"].append({
            "id": "denoise_finished", "kind": "native_evidence", "code": "backend.native", "since": "0.5.30",
            "substring": "[DenoisingStage] native path finished", "meaning": "made up",
            "example": "[12-06 10:00:00] [DenoisingStage] native path finished in 3 steps"})

    path = tmp_path / "log_markers.yaml"
    path.write_text(yaml.safe_dump(_catalog_with(add_release)))
    catalog = log_markers.load_catalog(path)
    made_up, older = catalog.for_version("0.5.30"), catalog.for_version("0.5.23")
    assert not made_up.selection_warnings and made_up.release.bcg_supported
    assert "denoise_finished" in {m.id for m in made_up.markers} - {m.id for m in older.markers}
    assert "warmup_failed_ran_cold" in {m.id for m in older.markers} - {m.id for m in made_up.markers}
    # the marker the older main prints again stays out of the new release, as it is out of 0.5.23
    assert "generated_n_outputs" not in {m.id for m in made_up.markers}
    assert catalog.for_version("0.5.27").release.id == "0.5.30"  # between releases: the newer set
    gate = log_gates.RequestLogGate(made_up, bcg_expected=False)
    gate.feed("[12-06 10:00:00] [DenoisingStage] native path finished in 3 steps")
    gate.feed("Warmup failed, so this request ran cold: 4.07 seconds includes first-use cost")
    verdict = checked(gate.verdict())
    assert verdict.native_evidence and "engine.warmup_failed" not in warning_codes(verdict)


def test_unreadable_yaml_is_an_input_error(tmp_path):
    bad = tmp_path / "markers.yaml"
    bad.write_text("schema: log-markers.v1\nmarkers: [\n")
    with pytest.raises(contract.InputError) as caught:
        log_markers.load_catalog(bad)
    assert caught.value.code == datafile.DATA_FILE_INVALID and "not valid YAML" in caught.value.message


# --- real logs: sglang 0.5.10.post1 on an H200 (native backend) ---------------------------------------------------

@pytest.mark.parametrize("run", ["tiny_plain", "tiny_profile", "full_plain", "full_profile"])
def test_h200_native_runs_are_valid_with_native_evidence_and_no_fallback(run):
    profiling = run.endswith("profile")
    verdict = scan(H200 / run / "log.txt", log_markers.markers_for_version("0.5.10.post1"), require_native=True,
                   profiling=profiling)
    assert verdict.valid, verdict.reasons
    assert verdict.release == "0.5.10.post1"
    assert verdict.native_evidence and verdict.fallback is None and not verdict.failure_lines
    assert verdict.generated_outputs == 1
    assert verdict.saved_outputs == (f"/srv/runs/{run}/out.png",)       # ANSI colour codes stripped from the path
    assert verdict.metrics_dumps == (f"/srv/runs/{run}/perf.json",)      # printed twice, recorded once
    assert len(verdict.profiler_traces) == (1 if profiling else 0)
    if profiling:
        trace_name = next(p.name for p in (H200 / run).glob("*.trace.json.gz"))
        assert verdict.profiler_traces[0].endswith("/prof/" + trace_name)
    assert "engine.attention_fallback" in warning_codes(verdict)        # "Cannot use FlashAttention backend ..."
    assert verdict.lines_seen == (H200 / run / "log.txt").read_text().count("\n")


def test_h200_log_cannot_back_a_bcg_row_or_a_profile_row_it_did_not_record():
    bcg = scan(H200 / "tiny_plain" / "log.txt", V0510, bcg_expected=True, quality="high")
    assert codes(bcg) == {"bcg.unsupported_release", "bcg.no_capture"}
    assert not bcg.bcg.capture_seen and bcg.bcg.captured_graphs == 0
    profile = scan(H200 / "tiny_plain" / "log.txt", V0510, profiling=True)
    assert codes(profile) == {"profiler.no_trace"}


# --- the fallback stops the run on the very line ---------------------------------------------------------------

def _first_line_with(lines: list[str], needles) -> int:
    return next(i for i, line in enumerate(lines) if any(n in line.lower() for n in needles))


@pytest.mark.parametrize("fallback_line", [
    "[12-01 10:00:01] Could not resolve native configuration for model '/srv/models/tinyflux'. Falling back to "
    "diffusers backend.",
    "[12-01 10:00:01] Using diffusers backend for model '/srv/models/tiny-FLUX.1-dev' (explicitly requested)",
    "[12-01 10:00:09] Loaded diffusers pipeline: FluxPipeline",
    "[12-01 10:00:01] \x1b[93mDetected a quantized model format ('/srv/m-awq'). The native sglang-diffusion engine "
    "currently only supports BF16/FP16. FALLING BACK TO DIFFUSERS BACKEND.\x1b[0;0m",
])
def test_feed_returns_the_stop_reason_on_the_fallback_line_itself(fallback_line):
    lines = (H200 / "tiny_plain" / "log.txt").read_text().split("\n")
    lines.insert(60, fallback_line)
    gate = log_gates.RequestLogGate(V0510, bcg_expected=False)
    answers = [gate.feed(line) for line in lines]
    stops = [i for i, answer in enumerate(answers) if answer]
    assert stops == [60] == [_first_line_with(lines, FALLBACK_SUBSTRINGS)]
    assert answers[60] == "backend.diffusers_fallback" == gate.stop_reason
    verdict = checked(gate.verdict())
    assert not verdict.valid and verdict.reason_codes()[0] == "backend.diffusers_fallback"
    assert verdict.fallback.line_no == 61 and "diffusers" in verdict.fallback.line.lower()


def test_only_the_first_fallback_line_stops_and_a_native_line_does_not():
    gate = log_gates.RequestLogGate(V0510, bcg_expected=False)
    assert gate.feed("Loaded transformer: FluxTransformer2DModel (sgl-diffusion version). model size: NA GB") is None
    assert gate.feed("Using diffusers backend for model 'm' (explicitly requested)") == "backend.diffusers_fallback"
    assert gate.feed("Loaded diffusers pipeline: FluxPipeline") is None
    assert gate.verdict().fallback.line_no == 2


# --- hand-written logs: BCG, late fusion and failures (exact reference strings) ---------------------------------

def test_bcg_capture_counts_graphs_and_segments():
    verdict = scan(LOGS / "bcg_captured" / "log.txt", V0523, bcg_expected=True, require_native=True)
    assert verdict.valid, verdict.reasons
    assert verdict.bcg.capture_seen and verdict.bcg.captured_graphs == 2 and verdict.bcg.captured_segments == 5
    assert verdict.bcg.signature_misses == 0 and not verdict.bcg.invalid_signals
    assert verdict.generated_outputs is None  # 0.5.23 prints no "Generated N outputs": not one of its markers
    assert verdict.saved_outputs == ("/srv/runs/bcg_captured/out.png",)


def test_a_capture_on_a_row_run_as_eager_is_invalid():
    verdict = scan(LOGS / "bcg_captured" / "log.txt", V0523, bcg_expected=False)
    assert codes(verdict) == {"bcg.unexpected_capture"}


@pytest.mark.parametrize("folder, markers, code", [
    ("bcg_capture_failed", V0523, "bcg.capture_failed"),
    ("bcg_no_graph_will_be_captured", V0523, "bcg.no_graph_will_be_captured"),
    ("bcg_disabled_legacy_main", MAIN, "bcg.disabled"),
    ("bcg_incompatible_quality_legacy_main", MAIN, "bcg.incompatible_option"),
])
def test_bcg_invalid_marker_invalidates_a_bcg_row_and_is_only_a_warning_on_an_eager_row(folder, markers, code):
    path = LOGS / folder / "log.txt"
    bcg = scan(path, markers, bcg_expected=True)
    assert codes(bcg) == {code, "bcg.no_capture"}
    assert [s.code for s in bcg.bcg.invalid_signals] == [code]
    eager = scan(path, markers, bcg_expected=False)
    assert eager.valid and code in warning_codes(eager)
    assert eager.bcg.invalid_signals[0].code == code                  # still collected on the eager run


def test_legacy_markers_belong_to_main_only():
    verdict = scan(LOGS / "bcg_disabled_legacy_main" / "log.txt", V0523, bcg_expected=True)
    assert codes(verdict) == {"bcg.no_capture"} and not verdict.bcg.invalid_signals


def test_signature_miss_after_capture_invalidates_a_bcg_row_and_is_counted():
    verdict = scan(LOGS / "bcg_signature_missed" / "log.txt", V0523, bcg_expected=True)
    assert codes(verdict) == {"bcg.signature_missed"}
    assert verdict.bcg.capture_seen and verdict.bcg.captured_graphs == 1 and verdict.bcg.signature_misses == 1
    assert "MISSED" in verdict.bcg.invalid_signals[0].line


@pytest.mark.parametrize("folder, markers, quality, late", [
    ("bcg_late_fusion_ltx2_high", V0523, "high", True),
    ("bcg_late_fusion_qwen_extra_high", MAIN, "extra-high", True),
    ("bcg_late_fusion_ltx2_high", V0523, "extra-high", False),  # the line is for quality=high, not this request's
    ("bcg_late_fusion_qwen_extra_high", MAIN, "high", False),
    ("bcg_late_fusion_ltx2_high", V0523, None, False),
    ("bcg_late_fusion_ltx2_high", V0523, "exact", False),        # not a late-fusion quality
    ("bcg_fusion_mounted_before_capture", V0523, "high", False), # mounted before capture: inside the graph
])
def test_late_quality_fusion_counts_only_after_capture_at_its_quality(folder, markers, quality, late):
    path = LOGS / folder / "log.txt"
    verdict = scan(path, markers, bcg_expected=True, quality=quality)
    assert verdict.bcg.capture_seen
    assert verdict.valid is not late
    assert bool(verdict.bcg.late_fusion_lines) is late
    if late:
        assert codes(verdict) == {"bcg.late_fusion_mount"}
        assert verdict.bcg.late_fusion_lines[0].line.endswith(f"for quality={quality}")
    eager = scan(path, markers, bcg_expected=False, quality=quality)
    assert not eager.bcg.late_fusion_lines                             # harmless without graphs


@pytest.mark.parametrize("markers", [V0523, MAIN])
def test_a_fusion_mounted_after_capture_at_lossless_invalidates_on_every_release_with_quality(tmp_path, markers):
    """Upstream's levels since the rename: lossless (and its alias extra-high) mounts fusions, exact does not."""
    text = (LOGS / "bcg_late_fusion_ltx2_high" / "log.txt").read_text(encoding="utf-8")
    log = tmp_path / "log.txt"
    log.write_text(text.replace("for quality=high", "for quality=lossless"), encoding="utf-8")
    assert markers.late_fusion_qualities == ("lossless", "extra-high", "high")
    verdict = scan(log, markers, bcg_expected=True, quality="lossless")
    assert codes(verdict) == {"bcg.late_fusion_mount"} and not verdict.valid
    assert scan(log, markers, bcg_expected=True, quality="exact").valid


def test_generation_failed_with_exit_code_zero_is_invalid():
    verdict = scan(LOGS / "generation_failed_rc0" / "log.txt", V0510, require_native=True)
    assert codes(verdict) == {"engine.stage_error", "engine.request_error", "engine.exception",
                              "engine.generation_failed", "engine.zero_outputs"}
    assert verdict.generated_outputs == 0 and verdict.native_evidence
    # two traceback headers, and the exception line that ends one of them (RuntimeError: CUDA error: ...)
    assert sum(f.code == "engine.exception" for f in verdict.failure_lines) == 3
    assert not verdict.saved_outputs and not verdict.metrics_dumps


def test_empty_output_and_zero_outputs_are_invalid():
    assert codes(scan(LOGS / "empty_output_zero_outputs" / "log.txt", V0510)) == {"engine.empty_output",
                                                                                 "engine.zero_outputs"}
    only = scan(LOGS / "zero_outputs_only" / "log.txt", V0510)
    assert codes(only) == {"engine.zero_outputs"} and only.generated_outputs == 0


# --- every BCG marker in the data, spliced into a good BCG log --------------------------------------------------

BCG_SIGNAL_MARKERS = [m for m in MAIN.markers if m.kind in ("bcg_invalid", "bcg_signature_miss")]


@pytest.mark.parametrize("marker", BCG_SIGNAL_MARKERS, ids=[m.id for m in BCG_SIGNAL_MARKERS])
def test_each_bcg_invalid_marker_invalidates_a_captured_bcg_run(marker):
    lines = (LOGS / "bcg_captured" / "log.txt").read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if "Processing prompt" in line) + 1
    lines.insert(at, "[12-01 10:00:41] " + marker.example)
    bcg = checked(log_gates.scan_log("\n".join(lines), MAIN, bcg_expected=True))
    assert codes(bcg) == {marker.code}
    assert bcg.bcg.invalid_signals[0].line_no == at + 1
    assert bcg.bcg.signature_misses == (marker.kind == "bcg_signature_miss")
    without_capture = [line for line in lines if "[Diffusion BCG] captured" not in line]
    eager = checked(log_gates.scan_log("\n".join(without_capture), MAIN, bcg_expected=False))
    assert eager.valid and marker.code in warning_codes(eager)


@pytest.mark.parametrize("marker_id", ["bcg_not_validated", "bcg_enabled_by_default", "bcg_evicted"])
def test_bcg_advisories_are_warnings_not_invalidations(marker_id):
    marker = next(m for m in MAIN.markers if m.id == marker_id)
    text = (LOGS / "bcg_captured" / "log.txt").read_text() + marker.example + "\n"
    verdict = checked(log_gates.scan_log(text, MAIN, bcg_expected=True))
    assert verdict.valid and marker.code in warning_codes(verdict)


def test_a_warm_engine_request_relies_on_captures_made_before_it():
    request_lines = "\n".join([
        "[12-01 11:00:00] Mounted LTX-2 fused RMSNorm+modulate for quality=high",
        "[12-01 11:00:02] Completed batch processing. Generated 1 outputs in 2.00 seconds"])
    assert codes(log_gates.scan_log(request_lines, V0523, bcg_expected=True)) == {"bcg.no_capture"}
    warm = checked(log_gates.scan_log(request_lines, V0523, bcg_expected=True, quality="high", prior_captures=2))
    assert codes(warm) == {"bcg.late_fusion_mount"} and warm.bcg.captured_graphs == 2


# --- line handling -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("regex, literal", [
    (r"\[Diffusion BCG\] captured(?: (?P<n>[0-9]+) segment\(s\))?", "[diffusion bcg] captured"),  # optional: out
    (r"Warmup req(?: \([0-9]+/[0-9]+\))? processing failed", " processing failed"),
    (r"^(?=.*Mounted )(?=.*for quality=high)", "for quality=high"),  # inside a positive lookahead
    (r"^(?!.*Mounted)Generation", "generation"),                     # never from a negative lookahead
    (r"(?:Generation|Request) failed", " failed"),
    (r"[0-9]+", ""),                                                 # no literal: the regex always runs
])
def test_required_literal_takes_only_what_every_match_needs(regex, literal):
    assert log_markers.required_literal(re.compile(regex)) == literal


def test_colour_and_cursor_codes_do_not_hide_markers_or_numbers():
    gate = log_gates.RequestLogGate(MAIN, bcg_expected=True)
    gate.feed("\x1b[A\r[12-01 10:00:40] [Diffusion BCG] captured \x1b[92m4\x1b[0;0m segment(s), \x1b[92m7\x1b[0;0m "
              "tensor input(s) for signature sig\r\n")
    gate.feed("\r  0%|          | 0/2 [00:00<?, ?it/s]\x1b[93m[11-30 19:20:42] Completed batch processing. Generated "
              "\x1b[92m3\x1b[0;0m outputs in 1.00 seconds\x1b[0;0m")
    verdict = checked(gate.verdict())
    assert verdict.bcg.captured_segments == 4 and verdict.generated_outputs == 3 and verdict.valid


def test_recorded_lines_are_capped_shortened_and_redacted(monkeypatch):
    secret = "hf_SECRETsecretSECRET0123456789"
    monkeypatch.setenv("HF_TOKEN", secret)
    gate = log_gates.RequestLogGate(V0510, bcg_expected=False)
    for _ in range(log_gates.MAX_RECORDED_LINES + 7):
        gate.feed(f"Traceback (most recent call last): token={secret} " + "x" * 5000)
    verdict = checked(gate.verdict())
    assert len(verdict.failure_lines) == log_gates.MAX_RECORDED_LINES
    assert "log.lines_omitted" in warning_codes(verdict) and "7 more" in dict(verdict.warnings)["log.lines_omitted"]
    assert all(len(f.line) <= log_gates.MAX_LINE_CHARS for f in verdict.failure_lines)
    assert secret not in json.dumps(verdict.to_json())
    assert codes(verdict) == {"engine.exception"}                      # one reason per code, not per line


def test_repeated_warnings_are_reported_once_with_a_count():
    verdict = scan(H200 / "tiny_plain" / "log.txt", V0510)
    rope = dict(verdict.warnings)["engine.rope_fallback"]
    assert "(3 times)" in rope and "FlashInfer not available" in rope


# --- real logs: sglang 0.5.10.post1 on this CPU box (recorded by tests/fixtures/engine-cpu-0.5.10/record.py) -----

def cpu_log(scenario: str) -> Path:
    path = CPU / scenario / "log.txt"
    if not path.is_file():
        pytest.skip(f"{path.relative_to(REPO)} not recorded yet (run tests/fixtures/engine-cpu-0.5.10/record.py)")
    return path


def cpu_run(scenario: str) -> dict:
    return json.loads((CPU / scenario / "run.json").read_text())


def test_cpu_native_run_is_valid():
    verdict = scan(cpu_log("native-ok"), V0510, require_native=True)
    assert verdict.valid, verdict.reasons
    assert verdict.native_evidence and verdict.fallback is None and verdict.generated_outputs == 1
    assert cpu_run("native-ok")["returncode"] == 0 and len(verdict.saved_outputs) == 1


@pytest.mark.parametrize("scenario, needle", [("fallback-auto", "falling back to diffusers backend"),
                                              ("diffusers-explicit", "using diffusers backend")])
def test_cpu_diffusers_runs_stop_on_their_first_fallback_line(scenario, needle):
    lines = cpu_log(scenario).read_text().split("\n")
    gate = log_gates.RequestLogGate(V0510, bcg_expected=False, require_native=True)
    stops = [i for i, line in enumerate(lines) if gate.feed(line)]
    assert stops == [_first_line_with(lines, FALLBACK_SUBSTRINGS)]
    assert needle in lines[stops[0]].lower()
    verdict = checked(gate.verdict())
    assert not verdict.valid and verdict.fallback.line_no == stops[0] + 1 and not verdict.native_evidence


def test_cpu_backend_sglang_on_an_unresolvable_model_is_an_engine_failure_not_a_fallback():
    verdict = scan(cpu_log("unresolved-backend-sglang"), V0510, require_native=True)
    assert codes(verdict) == {"engine.no_native_config", "engine.exception", "backend.no_native_evidence"}
    assert verdict.fallback is None and not verdict.saved_outputs and verdict.generated_outputs is None
    assert cpu_run("unresolved-backend-sglang")["returncode"] != 0


@pytest.mark.parametrize("scenario", ["gen-failed-rc0-b6-off", "gen-failed-rc0-b5-off"])
def test_cpu_failed_generation_with_exit_code_zero_is_invalid(scenario):
    verdict = scan(cpu_log(scenario), V0510, require_native=True)
    assert cpu_run(scenario)["returncode"] == 0
    assert not verdict.valid and verdict.fallback is None
    assert {"engine.request_error", "engine.generation_failed", "engine.zero_outputs"} <= codes(verdict)
    assert verdict.generated_outputs == 0 and verdict.native_evidence and not verdict.saved_outputs


def test_markers_per_release_follow_what_each_release_prints():
    """0.5.23 prints no "Generated N outputs" (0.5.10.post1 does); its BCG lines are the real H200 log lines."""
    ids_0523 = {m.id for m in V0523.markers}
    assert "generated_n_outputs" in {m.id for m in V0510.markers} and "generated_n_outputs" not in ids_0523
    assert {"bcg_captured", "bcg_capture_failed", "bcg_signature_missed", "bcg_warmup_captured_nothing",
            "bcg_dropped_after_capture", "bcg_quality_not_captured"} <= ids_0523
    h200 = TEST_FIXTURES / "gpu-h200-0.5.23"
    captured = scan(h200 / "direct-pair" / "bcg" / "log.txt", V0523, bcg_expected=True, require_native=True)
    assert captured.valid and captured.bcg.captured_segments == 58, captured.reasons
    failed = scan(h200 / "bcg-capture-failed" / "log.txt", V0523, bcg_expected=True, require_native=True)
    assert {"bcg.capture_failed", "bcg.warmup_captured_nothing"} <= set(failed.reason_codes())
    eager = scan(h200 / "direct-pair" / "eager" / "log.txt", V0523, bcg_expected=False, require_native=True)
    assert eager.valid and eager.generated_outputs is None, eager.reasons


def test_a_bad_catalog_entry_names_the_file_not_the_pattern(tmp_path):
    document = yaml.safe_load(log_markers.MARKERS_PATH.read_text())
    document["markers"][1]["example"] = "a line the pattern does not match"
    with pytest.raises(contract.InputError) as info:
        log_markers.parse_catalog(document, "my-markers.yaml")
    assert info.value.message.startswith("my-markers.yaml: markers[id=") and "example" in info.value.message


def test_one_ansi_stripper_cleans_every_real_engine_log_line():
    """Every ANSI code in the kept engine logs (CPU and H200, both releases: colours, tqdm's cursor-up) is gone after
    clean_line, and the two forms the earlier strippers each missed are stripped too: a private cursor mode (tqdm
    hiding the cursor) and a colour code whose ESC was lost."""
    logs = [p for p in TEST_FIXTURES.rglob("*") if p.suffix in (".txt", ".log") and p.is_file()]
    coloured = [line for p in logs for line in p.read_text(encoding="utf-8", errors="replace").splitlines()
                if "\x1b[" in line]
    assert len(coloured) > 100
    for line in coloured:
        cleaned = log_gates.clean_line(line)
        assert "\x1b" not in cleaned and not re.search(r"\[\d+(?:;\d+)*m", cleaned), line
    captured = "\x1b[A\r[12-01 10:00:40] [Diffusion BCG] captured \x1b[92m4\x1b[0;0m segment(s)"
    assert log_gates.clean_line(captured) == "\r[12-01 10:00:40] [Diffusion BCG] captured 4 segment(s)"
    assert log_gates.clean_line("\x1b[?25l[12-01] Completed [1;36m3[0m outputs\r\n") == "[12-01] Completed 3 outputs"
    assert log_gates.clean_line("shape [1, 3] in [00:01<00:00]") == "shape [1, 3] in [00:01<00:00]"
