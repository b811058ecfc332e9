"""Property-based fuzzing (hypothesis) of every parser and every CLI entry point that reads a number or a file.

The property is the product's contract: whatever the input, a CLI prints exactly one schema-valid JSON document,
exits with a documented code (never 70, the code for our own bugs), never lets an exception escape, and never hangs;
bad input is exit 2. Derandomized with fixed example counts, so CI runs the same cases every time in bounded time.
Each test adds its cases to CASES; the last test prints the totals quoted in reference/reliability.md.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import importlib
import io
import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CHECK_LANE, SCRIPTS, TEST_FIXTURES
from sgl_diffusion_bench import contract, inputs, paths

# `make check` (the under-a-minute lane) runs a fifth of the cases; `make test` and CI run them all.
SCALE = 5 if CHECK_LANE else 1
FUZZ = settings(max_examples=40 // SCALE, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
HANG_S = 30.0
DOCUMENTED_EXITS = {0, 1, 2, 3}  # ok, failed row, bad usage/input, precondition (70 is our bug, 130 Ctrl-C)
CASES: collections.Counter[str] = collections.Counter()
OUTCOMES: collections.Counter[str] = collections.Counter()

PERF = TEST_FIXTURES / "engine-cpu-0.5.10" / "native-ok" / "perf.json"
PERF_OTHER = TEST_FIXTURES / "engine-cpu-0.5.10" / "diffusers-explicit" / "perf.json"
SAMPLE_TRACE = paths.DATA_DIR / "sample_trace.json.gz"
NIGHTLY = TEST_FIXTURES / "nightly" / "comparison_configs.json"
REPORT = TEST_FIXTURES / "bench-report" / "example.json"
_stdio_lock = threading.Lock()


def invoke(cli: str, argv: list[str], family: str) -> tuple[int, dict]:
    """Run ``scripts/<cli>`` in-process and check the contract; returns (exit code, document)."""
    module = importlib.import_module(f"sgl_diffusion_bench.cli.{cli}")
    out, err, result = io.StringIO(), io.StringIO(), {}

    def call() -> None:
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                result["rc"] = module.main(argv)
        except BaseException as exc:  # noqa: BLE001 - an escaping exception is exactly what we look for
            result["exc"] = exc

    with _stdio_lock:
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        thread.join(HANG_S)
    CASES[family] += 1
    assert not thread.is_alive(), f"hang over {HANG_S} s: {cli} {argv}"
    assert "exc" not in result, f"traceback: {cli} {argv}: {result.get('exc')!r}"
    rc = result["rc"]
    document = json.loads(out.getvalue())  # exactly one document: trailing text fails here
    assert contract.validation_errors(document) == [], (argv, contract.validation_errors(document))
    assert rc in DOCUMENTED_EXITS, f"exit {rc}: {cli} {argv}: {document.get('error')}"
    assert (rc == 0) == (document["ok"] is True) or document["schema"] != "error.v1"
    OUTCOMES[f"exit {rc}"] += 1
    return rc, document


# ----------------------------------------------------------------------------------------------- numbers on argv

NUMBER_TEXT = st.one_of(
    st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999", "-1e999", "1.7e308", "4.9e-324",
                     "-0", "0", "-1", "1", "2", "51", "1" * 400, "0x10", "", " ", "1_000", "+3", "٣", "1e3"]),
    st.integers(-10**30, 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)

BENCH = ["--model", "tiny-flux-cpu", "--campaign", "aa", "--engine-capabilities", "recent", "--dry-run", "--json"]
NUMERIC_FLAGS = [
    ("bench", BENCH, "--rounds"), ("bench", BENCH, "--threshold-pct"), ("bench", BENCH, "--cell-timeout-s"),
    ("bench", BENCH, "--warmup-requests"), ("bench", BENCH, "--samples"),
    ("bench", [*BENCH, "--until-verdict"], "--budget-rounds"),
    ("bench", ["--all", "--engine-capabilities", "recent", "--dry-run", "--json"], "--max-gpus"),
    ("compare", [str(PERF), str(PERF_OTHER), "--json"], "--threshold-pct"),
    ("compare", [str(PERF), str(PERF_OTHER), "--json"], "--seed"),
    ("trace", ["hotspots", str(SAMPLE_TRACE), "--json"], "--top"),
    ("cache", ["preflight", "--model", str(TEST_FIXTURES), "--cache-dir", "/tmp", "--json"], "--headroom-bytes"),
    ("cache", ["preflight", "--model", str(TEST_FIXTURES), "--cache-dir", "/tmp", "--json"], "--hub-timeout-s"),
    ("env", ["print-idle-gpus", "--json"], "--count"),
    ("profile", ["--model", "tiny-flux-cpu", "--engine-capabilities", "recent", "--dry-run", "--json"],
     "--num-profiled-timesteps"),
    ("profile", ["--model", "tiny-flux-cpu", "--engine-capabilities", "recent", "--dry-run", "--json"],
     "--timeout-s"),
]


@settings(FUZZ, max_examples=200 // SCALE)
@given(case=st.sampled_from(NUMERIC_FLAGS), value=NUMBER_TEXT)
def test_every_numeric_flag_refuses_what_is_not_a_finite_in_range_number(case, value):
    cli, argv, flag = case
    rc, document = invoke(cli, [*argv, f"{flag}={value}"], "numeric flags")
    try:
        finite = math.isfinite(float(value))
    except (ValueError, OverflowError):
        finite = False
    if not finite:
        assert rc == 2 and document["error"]["code"] == "usage.invalid_arguments", (flag, value, document)


# ----------------------------------------------------------------------------------------------- input files

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**40), 10**40),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
JSON_VALUES = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=20)
_FIELD_VALUES = st.one_of(_scalars, st.sampled_from([-5, -1e308, 1.7e308, 10**30, "12", [], {}]))


def _mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    for position, delete, insert in edits:
        position %= max(len(data), 1)
        data = data[:position] + insert + data[position + delete:]
    return data


def _trace_event(fields: dict) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 0, "ts": 1, "dur": 2, **fields}


FILE_CONTENTS = st.one_of(
    st.binary(max_size=200),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 200_000).map(lambda n: b"[" * n + b"]" * n),
    st.sampled_from([b'{"a": NaN}', b"[Infinity]", b"[1e999]", b'{"a": "\xff\xfe"}', b"\xef\xbb\xbf{}",
                     b"[" + b"9" * 5000 + b"]", b"", b"   ", gzip.compress(b"{}"), gzip.compress(b"x")[:10]]),
    st.tuples(st.sampled_from([PERF, NIGHTLY, REPORT]),
              st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 8), st.binary(max_size=6)), max_size=4))
    .map(lambda t: _mutate(t[0].read_bytes(), t[1])),
    st.lists(st.dictionaries(st.sampled_from(["ts", "dur", "pid", "tid", "name", "ph", "args"]), _FIELD_VALUES,
                             max_size=3), min_size=1, max_size=4)
    .map(lambda evs: json.dumps({"traceEvents": [_trace_event(e) for e in evs]}).encode()),
    st.dictionaries(st.sampled_from(["model", "prompt", "seed", "width", "num_gpus", "frameworks",
                                     "sglang_request_extra", "num_inference_steps"]), _FIELD_VALUES, max_size=4)
    .map(lambda fields: json.dumps({"cases": [dict(json.loads(NIGHTLY.read_text())["cases"][0], **fields)]}).encode()),
)

FILE_READERS = [
    ("trace", lambda f: ["hotspots", f, "--json"]),
    ("trace", lambda f: ["compare", f, str(SAMPLE_TRACE), "--json"]),
    ("compare", lambda f: [str(PERF), f, "--json"]),
    ("report", lambda f: [f, "--json"]),
    ("bench", lambda f: ["--validate-nightly-alignment", "--nightly-config", f, "--json"]),
    ("bench", lambda f: ["--model", "tiny-flux-cpu", "--dry-run", "--engine-capabilities", f, "--json"]),
    ("cache", lambda f: ["verify", "--ledger", f, "--json"]),
]


@settings(FUZZ, max_examples=350 // SCALE)
@given(reader=st.sampled_from(FILE_READERS), content=FILE_CONTENTS, gz=st.booleans())
def test_every_input_file_gives_one_document_and_a_documented_exit(tmp_path_factory, reader, content, gz):
    path = tmp_path_factory.mktemp("fuzz") / ("input.json.gz" if gz else "input.json")
    path.write_bytes(gzip.compress(content) if gz else content)
    cli, argv = reader
    invoke(cli, argv(str(path)), "input files")


@pytest.mark.parametrize("kind", ["fifo", "directory", "dev-null", "socket"])
@pytest.mark.parametrize("reader", FILE_READERS, ids=lambda r: f"{r[0]}-{r[1]('F')[0]}")
def test_inputs_that_are_not_regular_files_are_refused_without_blocking(tmp_path, kind, reader):
    path = tmp_path / "input"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        import socket

        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    else:
        path = Path("/dev/null")
    cli, argv = reader
    rc, document = invoke(cli, argv(str(path)), "non-regular inputs")
    assert rc in (2, 3) and document["schema"] == "error.v1", document


# ----------------------------------------------------------------------------------------------- pure parsers


@FUZZ
@given(value=JSON_VALUES)
def test_parse_json_round_trips_every_finite_document(value):
    CASES["parsers"] += 1
    text = json.dumps(value)
    if any(len(t) > inputs.MAX_INT_DIGITS for t in _int_tokens(value)):
        with pytest.raises(contract.InputError):
            inputs.parse_json(text, "x", "input.x")
    else:
        assert inputs.parse_json(text, "x", "input.x") == json.loads(text)


def _int_tokens(value) -> list[str]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        return [str(abs(value))]
    if isinstance(value, list):
        return [t for v in value for t in _int_tokens(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _int_tokens(v)]
    return []


@settings(FUZZ, max_examples=200 // SCALE)
@given(text=st.one_of(st.text(max_size=60), st.binary(max_size=60).map(lambda b: b.decode("latin-1"))))
def test_parse_json_refuses_with_an_input_error_only(text):
    CASES["parsers"] += 1
    with contextlib.suppress(contract.InputError):
        inputs.parse_json(text, "x", "input.x")
    assert inputs.max_depth(text) >= 0


@FUZZ
@given(document=JSON_VALUES)
def test_perf_dump_parser_raises_only_its_own_error(document):
    from sgl_diffusion_bench.judging import perf_dump

    CASES["parsers"] += 1
    with contextlib.suppress(perf_dump.PerfDumpError):
        metrics = perf_dump.parse_perf_dump(document, "device")
        assert all(math.isfinite(v) for v in vars(metrics).values() if isinstance(v, float))


@FUZZ
@given(data=FILE_CONTENTS)
def test_trace_decoder_raises_only_input_errors(data):
    from sgl_diffusion_bench.trace import load

    CASES["parsers"] += 1
    with contextlib.suppress(contract.InputError):
        events, _ = load.decode_events(data, "fuzz")
        assert all(0 <= e.dur <= 1e13 for e in events)


# ----------------------------------------------------------------------------------------------- secrets


@FUZZ
@given(token=st.one_of(st.sampled_from(["true", "null", "false", "schema", '": "', "1234", "created_at", "\\n\\n",
                                        "bench", "cache"]),
                       st.text(min_size=4, max_size=10)),
       payload=JSON_VALUES)
def test_a_token_of_any_value_never_breaks_the_document_or_appears_in_a_string(monkeypatch, token, payload):
    CASES["secrets"] += 1
    monkeypatch.setenv("HF_TOKEN", token)
    document = contract.envelope("cache-verify.v1", "t", note=f"has {token} inside", payload=payload,
                                 nested={"k": [token, {"v": token}]})
    try:
        text = contract.dumps(document)
    except ValueError:
        return  # a payload float json cannot write; not this property
    parsed = json.loads(text)

    assert parsed["schema"] == "cache-verify.v1"  # an envelope constant is never redacted into something else

    def strings(v):
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for k, x in v.items():
                if k not in contract.ENVELOPE_CONSTANTS:
                    yield from strings(x)
        elif isinstance(v, list):
            for x in v:
                yield from strings(x)

    assert not any(token in s for s in strings(parsed))


@pytest.mark.parametrize("token", ["true", "null"])
def test_real_cli_stdout_stays_json_with_a_token_that_is_a_json_literal(token):
    proc = subprocess.run([sys.executable, str(SCRIPTS / "diffusion_skill_env.py"), "print-root", "--json"],
                          capture_output=True, text=True, env=dict(os.environ, HF_TOKEN=token), timeout=120)
    CASES["secrets"] += 1
    document = json.loads(proc.stdout)
    assert proc.returncode == 0 and document["ok"] is True and contract.validation_errors(document) == []


# ----------------------------------------------------------------------------------------------- real processes

HOSTILE_ARGV = [
    ("bench_diffusion_denoise", BENCH + ["--threshold-pct", "nan"]),
    ("bench_diffusion_denoise", BENCH + ["--rounds", "1000000"]),
    ("compare_perf", [str(PERF), str(PERF_OTHER), "--threshold-pct", "Infinity", "--json"]),
    ("analyze_trace", ["hotspots", str(SAMPLE_TRACE), "--top", "-1", "--json"]),
    ("cleanup_model_cache", ["preflight", "--model", "x", "--cache-dir", "/tmp", "--hub-timeout-s", "nan", "--json"]),
    ("diffusion_skill_env", ["lease", "--count", "1e308", "--json", "--", "true"]),
    ("profile_diffusion", ["--model", "tiny-flux-cpu", "--timeout-s", "-5", "--dry-run", "--json"]),
    ("render_bench_report", ["/dev/stdin", "--json"]),
]


@pytest.mark.parametrize("script, argv", HOSTILE_ARGV, ids=[f"{s}-{i}" for i, (s, _) in enumerate(HOSTILE_ARGV)])
def test_each_script_as_a_real_process_refuses_hostile_input_with_exit_2(script, argv):
    proc = subprocess.run([sys.executable, str(SCRIPTS / f"{script}.py"), *argv], capture_output=True, text=True,
                          timeout=120, input="")
    CASES["real processes"] += 1
    document = json.loads(proc.stdout)
    assert proc.returncode == 2 and document["schema"] == "error.v1" and "Traceback" not in proc.stderr, proc.stderr


def test_zz_report_the_case_counts(capsys):
    """Not a property: prints the figures reference/reliability.md quotes (run with -s to see them)."""
    with capsys.disabled():
        print(f"\nreliability fuzz: {sum(CASES.values())} cases {dict(CASES)}; outcomes {dict(OUTCOMES)}")
    assert sum(CASES.values()) > 0
