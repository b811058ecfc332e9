"""Property-based tests (hypothesis) of every reader and comparer on documents shaped like the real ones, and of the
sweep's readers (a spec, a sweep folder's state and result files) and the bounded gzip reader.

test_reliability_fuzz.py throws bytes at every reader; here the inputs are near-valid documents (perf dumps, engine
logs, traces, bench reports, engine baseline files) whose figures and shapes vary over the whole float range and
every structural slip. The property is the product's contract: a schema-valid document (exit 0 or 1) or a refusal
(exit 2 or 3), never exit 70, never a traceback, every example within DEADLINE. Each CLI runs in-process
(conftest.run_main, which checks the document against its schema and stderr for a traceback); fixed, derandomized
example counts keep the file well under a minute on a 2-core host.
"""

from __future__ import annotations

import copy
import datetime
import gzip
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench import contract, inputs
from sgl_diffusion_bench.judging import engine_baselines, perf_dump
from sgl_diffusion_bench.sweep import spec as sweep_spec
from sgl_diffusion_bench.sweep import state as sweep_state

DEADLINE = datetime.timedelta(seconds=20)  # a hang is minutes; a busy 2-core host is a few seconds
PROPERTIES = settings(max_examples=50, deadline=DEADLINE, derandomize=True, database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                             HealthCheck.data_too_large])
CONTRACT_EXITS = {0, 1, 2, 3}  # a document (ok, or a failed row), bad input, precondition; 70 is our bug
REFUSALS = {2, 3}
LOG = TEST_FIXTURES / "engine-cpu-0.5.23" / "native-ok" / "log.txt"
PERF = TEST_FIXTURES / "engine-cpu-0.5.23" / "native-ok" / "perf.json"
REPORT = TEST_FIXTURES / "bench-report" / "example.json"

# Figures over the whole float range, with the edges that broke arithmetic before: the largest finite float, the
# smallest subnormal, the read-time bound and just past it, zero and negatives.
EDGES = [0.0, -0.0, 1.0, -1.0, 5e-324, 1e-300, 1e12, 1e12 * (1 + 1e-15), 1.0000001e12, 1.7e308, -1.7e308, 2 ** 53]
figures = st.one_of(st.sampled_from(EDGES), st.sampled_from([e for e in EDGES if e > 0]),
                    st.floats(min_value=0, allow_nan=False, allow_infinity=False),
                    st.floats(allow_nan=False, allow_infinity=False), st.floats(0.01, 1e5), st.integers(-10, 10 ** 6))
plausible = st.floats(0.01, 1e5)
STAGE_NAMES = ["TextEncodingStage", "DenoisingStage", "DecodingStage", "BeforeDenoisingStage", "RefinementStage",
               "Scheduler.return_result.spill_arrays", "GPUWorker.frame_materialize_for_return"]
junk = st.one_of(st.none(), st.booleans(), st.text(max_size=4), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), figures)


def _maybe_damaged(valid: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """Mostly the document as drawn; sometimes one key dropped or its value swapped for junk."""
    def damage(doc: dict[str, Any], data: Any) -> Any:
        if not doc:
            return doc
        key = data.draw(st.sampled_from(sorted(doc)))
        doc = dict(doc)
        if data.draw(st.booleans()):
            del doc[key]
        else:
            doc[key] = data.draw(junk)
        return doc
    return st.one_of(valid, valid, st.tuples(valid, st.data()).map(lambda pair: damage(*pair)))


def _perf_dumps(figure: st.SearchStrategy[float]) -> st.SearchStrategy[dict[str, Any]]:
    step = st.fixed_dictionaries({"name": st.one_of(st.sampled_from(STAGE_NAMES), st.sampled_from(STAGE_NAMES),
                                                    st.text(max_size=6)),
                                  "duration_ms": figure})
    denoise = st.fixed_dictionaries({"step": st.one_of(st.integers(0, 4), st.sampled_from([-1, 2.0])),
                                     "duration_ms": figure})
    snapshot = st.fixed_dictionaries({"peak_reserved_mb": figure},
                                     optional={k: figure for k in ("allocated_mb", "reserved_mb",
                                                                   "peak_allocated_mb", "peak_host_anon_mb")})
    checkpoints = st.dictionaries(st.sampled_from(["before_forward", "after_forward", "runtime_peak", "load_peak"]),
                                  snapshot, max_size=3)
    return st.fixed_dictionaries(
        {"total_duration_ms": figure, "steps": st.lists(step, max_size=5)},
        optional={"denoise_steps_ms": st.lists(denoise, max_size=4), "memory_checkpoints": checkpoints,
                  "commit_hash": st.sampled_from(["", "N/A", "abc123"]), "tag": st.text(max_size=4),
                  "meta": st.one_of(st.dictionaries(st.text(max_size=3), junk, max_size=2), junk)})


def _clean(doc: dict[str, Any]) -> dict[str, Any]:
    """The dump with the slips a real engine never makes taken out (names, step numbers), figures kept."""
    doc = dict(doc, steps=[s for s in doc["steps"] if s["name"]])
    if "denoise_steps_ms" in doc:
        doc["denoise_steps_ms"] = [dict(s, step=i) for i, s in enumerate(doc["denoise_steps_ms"])]
    if not isinstance(doc.get("meta", {}), dict):
        del doc["meta"]
    return doc


POSITIVE_EDGES = st.sampled_from([e for e in EDGES if e > 0])
# Mostly dumps a schema accepts (plausible figures, or one of the edges), so comparisons run far enough to do the
# arithmetic; the rest with any figure and one structural slip.
plausible_dumps = _perf_dumps(plausible).map(_clean)
perf_dumps = st.one_of(plausible_dumps, _perf_dumps(st.one_of(plausible, POSITIVE_EDGES)).map(_clean),
                       _maybe_damaged(_perf_dumps(figures)))


def _write(path: Path, document: Any) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")  # figures are finite: valid JSON
    return str(path)


def _outcome(fn, *args: Any) -> Any:
    try:
        return fn(*args)
    except contract.InputError as exc:
        return exc.code


@PROPERTIES
@given(document=perf_dumps)
def test_the_fast_perf_dump_reader_agrees_with_the_schema_path(tmp_path_factory, document):
    """load_perf_dump's typed one-pass decoding gives exactly what the schema-checked path gives: the same figures,
    or the same refusal code (it never accepts a dump the schema refuses)."""
    path = _write(tmp_path_factory.mktemp("dump") / "perf.json", document)
    fast = _outcome(perf_dump.load_perf_dump, path, "device")
    checked = _outcome(perf_dump.parse_perf_dump, document, "device")
    assert fast == checked


@PROPERTIES
@given(dumps=st.lists(perf_dumps, min_size=2, max_size=3), markdown=st.booleans())
def test_compare_perf_files_gives_a_document_or_a_refusal(tmp_path_factory, dumps, markdown):
    folder = tmp_path_factory.mktemp("files")
    paths = [_write(folder / f"d{i}.json", d) for i, d in enumerate(dumps)]
    extra = ["--markdown", str(folder / "c.md")] if markdown else []
    run = run_main("compare_perf", *paths, *extra, "--resamples", "100", "--json")
    assert run.returncode in {0} | REFUSALS, run.stdout[-2000:]


@PROPERTIES
@given(baseline=st.lists(st.one_of(plausible_dumps, perf_dumps), min_size=1, max_size=3),
       candidate=st.lists(st.one_of(plausible_dumps, perf_dumps), min_size=1, max_size=3),
       threshold=st.sampled_from(["1.5", "1e-300", "100", "0.001"]), discard=st.booleans())
def test_compare_perf_groups_gives_a_document_or_a_refusal(tmp_path_factory, baseline, candidate, threshold,
                                                           discard):
    folder = tmp_path_factory.mktemp("groups")
    base = [_write(folder / f"base_r{i + 1:02d}p01.json", d) for i, d in enumerate(baseline)]
    cand = [_write(folder / f"cand_r{i + 1:02d}p02.json", d) for i, d in enumerate(candidate)]
    run = run_main("compare_perf", "--baseline", *base, "--candidate", *cand, "--threshold-pct", threshold,
                   "--resamples", "100", *(["--discard-outliers"] if discard else []), "--json")
    assert run.returncode in {0} | REFUSALS, run.stdout[-2000:]
    if run.returncode == 0:
        stats = run.document["comparisons"][0]["statistics"]
        assert stats is None or stats["verdict"] in {"improved", "regressed", "no_significant_change",
                                                     "insufficient_data"}


LOG_LINES = LOG.read_text(encoding="utf-8").splitlines()


@PROPERTIES
@given(lines=st.lists(st.one_of(st.sampled_from(LOG_LINES), st.text(max_size=40)), max_size=60),
       dump=st.one_of(st.none(), perf_dumps), bcg=st.booleans(), exit_code=st.sampled_from(["0", "1", "-9"]))
def test_judge_run_gives_a_document_or_a_refusal_for_any_log(tmp_path_factory, lines, dump, bcg, exit_code):
    folder = tmp_path_factory.mktemp("judge")
    log = folder / "log.txt"
    log.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    out = folder / "out.png"
    out.write_bytes(b"\x89PNG\r\n\x1a\n")
    args = ["--log", str(log), "--engine-version", "0.5.23", "--output", str(out), "--exit-code", exit_code]
    if dump is not None:
        args += ["--perf-dump", _write(folder / "perf.json", dump)]
    run = run_main("judge_run", *args, *(["--bcg"] if bcg else []), "--json")
    assert run.returncode in CONTRACT_EXITS, run.stdout[-2000:]


def _trace_events() -> st.SearchStrategy[Any]:
    event = st.fixed_dictionaries(
        {"ph": st.sampled_from(["X", "B", "E", "i", "M", "f", "s", ""]),
         "name": st.sampled_from(["aten::mm", "void gemm_kernel<float>", "cudaLaunchKernel", "DenoisingStage",
                                  "denoising_step_0", "ProfilerStep#1", "aten::conv2d", ""])},
        optional={"cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "gpu_user_annotation",
                                          "user_annotation", "python_function", "gpu_memcpy"]),
                  "ts": figures, "dur": figures, "pid": st.one_of(st.integers(-1, 3), st.text(max_size=3)),
                  "tid": st.integers(0, 3),
                  "args": st.one_of(st.fixed_dictionaries({"correlation": st.integers(-2, 5)}), junk)})
    return st.lists(event, max_size=25)


@PROPERTIES
@given(events=_trace_events(), other=_trace_events(), wrapped=st.booleans(),
       command=st.sampled_from(["hotspots", "classify", "compare"]))
def test_analyze_trace_gives_a_document_or_a_refusal_for_any_trace(tmp_path_factory, events, other, wrapped,
                                                                    command):
    folder = tmp_path_factory.mktemp("trace")
    first = _write(folder / "a.trace.json", {"traceEvents": events} if wrapped else events)
    args = [command, first] + ([_write(folder / "b.trace.json", {"traceEvents": other})] if command == "compare"
                               else [])
    run = run_main("analyze_trace", *args, "--json")
    assert run.returncode in CONTRACT_EXITS, run.stdout[-2000:]


REPORT_DOC = json.loads(REPORT.read_text(encoding="utf-8"))


def _leaf_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in the report, so a test can swap any one of them."""
    paths = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            paths += _leaf_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node[:3]):
            paths += _leaf_paths(value, (*prefix, index))
    return paths


REPORT_PATHS = [p for p in _leaf_paths(REPORT_DOC) if p]


def _swapped(document: Any, changes: list[tuple[tuple, Any]]) -> Any:
    doc = copy.deepcopy(document)
    for path, value in changes:
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value
    return doc


@PROPERTIES
@given(changes=st.lists(st.tuples(st.sampled_from(REPORT_PATHS), junk), min_size=1, max_size=4))
def test_render_bench_report_gives_a_document_or_a_refusal_for_any_report(tmp_path_factory, changes):
    folder = tmp_path_factory.mktemp("report")
    try:
        document = _swapped(REPORT_DOC, changes)
    except (KeyError, IndexError, TypeError):  # an earlier swap replaced a parent: the document as it stands
        document = _swapped(REPORT_DOC, changes[:1])
    path = _write(folder / "report.json", document)
    run = run_main("render_bench_report", path, "--output-dir", str(folder / "out"), "--json")
    assert run.returncode in CONTRACT_EXITS, run.stdout[-2000:]


def _baseline_files() -> st.SearchStrategy[Any]:
    tolerance = st.one_of(figures, junk)
    scenario = st.fixed_dictionaries({}, optional={
        "expected_e2e_ms": figures, "expected_avg_denoise_ms": figures, "expected_median_denoise_ms": figures,
        "runtime_peak_vram_mb": figures, "timing_tolerance": st.one_of(figures, st.none()),
        "stages_ms": st.dictionaries(st.sampled_from(STAGE_NAMES[:4]), figures, max_size=3)})
    tolerances = st.fixed_dictionaries({k: tolerance for k in ("e2e", "denoise_stage", "non_denoise_stage",
                                                               "denoise_agg", "runtime_peak_vram")})
    return _maybe_damaged(st.fixed_dictionaries({
        "scenarios": st.dictionaries(st.sampled_from(["flux_image_t2i", "qwen_image_t2i"]), scenario, max_size=2),
        "tolerances": st.fixed_dictionaries({"pr_test": tolerances}, optional={"long_term": tolerances})}))


@settings(PROPERTIES)
@given(baseline=_baseline_files(), dump=plausible_dumps)
def test_compare_engine_baseline_gives_a_document_or_a_refusal_for_any_baseline_file(tmp_path_factory, baseline,
                                                                                     dump):
    folder = tmp_path_factory.mktemp("engine")
    target = folder / "sglang" / engine_baselines.BASELINE_DIR / "h100.json"
    target.parent.mkdir(parents=True)
    _write(target, baseline)
    run = run_main("compare_engine_baseline", "--perf-dump", _write(folder / "perf.json", dump), "--gpu-class",
                   "h100", "--scenario", "flux_image_t2i", "--engine-dir", str(folder / "sglang"), "--json")
    assert run.returncode in CONTRACT_EXITS, run.stdout[-2000:]


# --- the sweep's readers: a user's spec (YAML), and the folder's own files ------------------------------------------

SPEC_PIECES = ["schema: sweep-spec.v1", "presets: {names: [tiny-flux-cpu]}", "repeats: 2", "repeats: .inf",
               "campaign: {mode: ab, arm_b_args: \"--x 'y\"}", "campaign: {threshold_pct: .nan}", "a: &x [1, 2]",
               "b: *x", "overrides: [{seed: 1}, {seed: 2}]", "overrides: [{seed: " + "9" * 40 + "}]", "- 1",
               "presets: {filter: {}}", "{", "]]", "\t", "name: ok-1", "x: [[[[[[[[", "? complex", "!!python/tuple [1]"]


@PROPERTIES
@given(pieces=st.lists(st.one_of(st.sampled_from(SPEC_PIECES), st.text(max_size=30)), max_size=8))
def test_sweep_plan_gives_a_document_or_a_refusal_for_any_spec(tmp_path_factory, pieces):
    folder = tmp_path_factory.mktemp("spec")
    spec = folder / "spec.yaml"
    spec.write_text("\n".join(pieces), encoding="utf-8", errors="surrogatepass")
    run = run_main("sweep_diffusion", "plan", str(spec), "--folder", str(folder / "sw"), "--json")
    assert run.returncode in CONTRACT_EXITS
    if run.returncode in REFUSALS:
        assert run.document["schema"] == "error.v1"


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=12)
state_like = st.fixed_dictionaries({"status": st.sampled_from(["running", "done", "failed", "pending", "x"])},
                                   optional={"pid": json_values, "attempt": json_values, "host": json_values,
                                             "hash": json_values, "result_sha256": json_values, "reason": json_values})


@PROPERTIES
@given(state=st.one_of(state_like, json_values), result=st.one_of(st.none(), json_values))
def test_sweep_status_and_merge_read_any_shard_files(tmp_path_factory, state, result):
    folder = tmp_path_factory.mktemp("sweep") / "sw"
    spec = sweep_spec.expand({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]}}, "s.yaml")
    sweep_state.prepare(folder, spec.name, spec.document)
    directory = sweep_state.shard_dir(folder, spec.shards[0].id)
    directory.mkdir(parents=True)
    (directory / "state.json").write_text(json.dumps(state))  # NaN and Infinity included, as a tampered file has
    if result is not None:
        (directory / "result.json").write_text(json.dumps(result))
    for command in ("status", "merge"):
        run = run_main("sweep_diffusion", command, "--folder", str(folder), "--json")
        assert run.returncode in {0, 1}, run.document
        assert run.document["shards"][0]["status"] in sweep_state.STATUSES


@PROPERTIES
@given(data=st.one_of(st.binary(max_size=64), st.builds(lambda b, cut: gzip.compress(b)[:cut],
                                                        st.binary(max_size=256), st.integers(0, 300))))
def test_a_gz_input_is_its_bytes_or_a_refusal(data):
    try:
        out = inputs.gunzip_bounded(data, "x.gz", "input.unreadable")
    except contract.InputError as exc:
        assert exc.code == "input.unreadable"
    else:
        assert out == gzip.decompress(data)
