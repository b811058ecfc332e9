#!/usr/bin/env python3
"""Every reader of every tool against hostile files (issue 44): how many cases end in a traceback, exit 70, a hang,
a lie, a leaked token or a lost file.

Each case runs a real script (``--json``) with one input replaced by a hostile file: a FIFO, a device, a file that
refuses reads, a directory, a link to ``/dev/zero``, bytes that are not UTF-8, non-finite or 5001-digit numbers,
documents 100,000 deep, of the wrong shape, past the size bound, gzip bombs, YAML alias bombs and duplicate keys.
The surfaces are the documents the tools read from the user (traces, perf dumps, engine logs, bench reports, request
manifests, sweep specs, cache ledgers) and from their own folders (a sweep folder's ``sweep.json``, ``state.json``
and ``result.json``, an evidence folder's ``evidence.json``).

A case is counted as
- ``traceback``: stderr holds a Python traceback;
- ``exit_70``: the tool's last-resort handler caught its own bug;
- ``hang``: still running after ``--hang-s`` seconds (then killed);
- ``lie``: exit 0, or a document saying ``ok: true``, for an input no reader may accept;
- ``bad_output``: stdout is not exactly one JSON document naming its schema, or an error document's exit code
  differs from the process's;
- ``leak``: the canary token set as ``HF_TOKEN`` appears on stdout or stderr;
- ``lost_file``: a canary file beside the inputs is gone afterwards.
Every other case is ``refused`` (a clean refusal with exit 1, 2 or 3), or ``accepted`` where the input, odd as it is,
is valid for that reader (a prompt holding U+2028 in a request manifest).

  .venv/bin/python benchmarks/hostile_inputs.py [--parallel 2] [--hang-s 60] [--only SURFACE ...] [--json]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
FIXTURES = ROOT / "tests" / "fixtures"
TRACE = FIXTURES / "traces-h200" / "flux-eager-2_steps-full_stages-global-rank0.trace.json.gz"
PERF = FIXTURES / "engine-cpu-0.5.23" / "native-ok" / "perf.json"
LOG = FIXTURES / "engine-cpu-0.5.23" / "native-ok" / "log.txt"
EVIDENCE = FIXTURES / "gpu-h200-0.5.23" / "evidence-folder"
CPU_SPEC = SCRIPTS / "sgl_diffusion_bench" / "data" / "sample_sweep_cpu.yaml"
CANARY_TOKEN = "hf_CanaryTokenHostileInputs0123456789"
OUTCOMES = ("refused", "accepted", "traceback", "exit_70", "hang", "lie", "bad_output", "leak", "lost_file")


# -- hostile files: each a function that makes one at a path (or returns a path to use as is) ----------------------

def _bytes(data: bytes) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.write_bytes(data)
        return path
    return make


def _text(text: str) -> Callable[[Path], Path]:
    return _bytes(text.encode("utf-8", "surrogatepass"))


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _directory(path: Path) -> Path:
    path.mkdir()
    return path


def _link_to(target: str) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.symlink_to(target)
        return path
    return make


def _large(path: Path) -> Path:
    with path.open("wb") as out:  # 80 MB of spaces then a document: past every reader's size bound
        out.truncate(80 * 1024 * 1024)
    return path


def _gzip_bomb(path: Path) -> Path:
    with gzip.open(path, "wb", compresslevel=9) as out:
        chunk = b" " * (1024 * 1024)
        for _ in range(300):  # 300 MiB of spaces, about 300 KB packed
            out.write(chunk)
    return path


BILLION_LAUGHS = "\n".join(['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] +
                           [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)])

HOSTILE: dict[str, Callable[[Path], Path]] = {
    "missing": lambda path: path,
    "directory": _directory,
    "empty": _text(""),
    "fifo": _fifo,
    "dev_zero": lambda path: Path("/dev/zero"),
    "dev_urandom": lambda path: Path("/dev/urandom"),
    "proc_self_mem": lambda path: Path("/proc/self/mem"),
    "link_to_dev_zero": _link_to("/dev/zero"),
    "not_utf8": _bytes(b"\xff\xfe{\"a\": \x80\x81}"),
    "nul_bytes": _bytes(b"\x00" * 4096),
    "json_nan": _text('{"total_duration_ms": NaN, "steps": [], "schema": NaN}'),
    "json_infinity": _text('{"total_duration_ms": Infinity, "x": -Infinity}'),
    "json_huge_int": _text('{"total_duration_ms": ' + "9" * 5001 + "}"),
    "json_1e400": _text('{"total_duration_ms": 1e400}'),
    "json_deep_list": _text("[" * 100_000 + "]" * 100_000),
    "json_deep_object": _text('{"a":' * 100_000 + "1" + "}" * 100_000),
    "json_list": _text("[1, 2, 3]"),
    "json_string": _text('"a document"'),
    "json_null": _text("null"),
    "json_lone_surrogate": _text('{"schema": "\\ud800", "prompt": "\\udfff"}'),
    "json_duplicate_keys": _text('{"schema": "bench-report.v1", "schema": "error.v1"}'),
    "jsonl_line_separator": _text('{"prompt": "a\u2028cat"}\n{"prompt": "b\u0085cat"}\n'),
    "yaml_billion_laughs": _text(BILLION_LAUGHS),
    "yaml_duplicate_keys": _text("schema: sweep-spec.v1\nname: a\nname: b\npresets: {names: [tiny-flux-cpu]}\n"),
    "yaml_inf": _text("schema: sweep-spec.v1\nname: a\npresets: {names: [tiny-flux-cpu]}\nrepeats: .inf\n"),
    "too_large": _large,
    "gzip_bomb": _gzip_bomb,
    "gzip_truncated": _bytes(gzip.compress(b'{"traceEvents": [' + b'{"ph": "X"},' * 1000)[:200]),
}


# -- surfaces: where a hostile file goes, and the command that reads it ---------------------------------------------

def refused(document: dict, returncode: int, setup: Path) -> str | None:
    """The default rule: an input no reader may accept must not end in exit 0 or ``ok: true``."""
    return None if returncode != 0 and document.get("ok") is not True else "accepted a hostile input"


def judged_invalid(document: dict, returncode: int, setup: Path) -> str | None:
    """judge_run answers with a verdict: a hostile log or dump must never make the run valid."""
    return None if document.get("status") != "valid" and returncode != 0 else f"judged {document.get('status')}"


def plan_refused(document: dict, returncode: int, setup: Path) -> str | None:
    """A dry run lists what it refuses: a hostile manifest must be among them."""
    return None if returncode != 0 and document.get("refusals", True) else "planned a hostile manifest"


def shard_not_done(document: dict, returncode: int, setup: Path) -> str | None:
    """status and merge report every shard: the one whose document is damaged must not read as done."""
    shard = _first_shard(setup)
    listed = [s for s in document.get("shards", []) if isinstance(s, dict) and s.get("id") == shard]
    return f"shard {shard} reads as done" if any(s.get("status") == "done" for s in listed) else None


@dataclasses.dataclass(frozen=True)
class Surface:
    name: str
    argv: Callable[[Path, Path], list[str]]  # (hostile path, the case's work dir) -> argv after the script
    place: Callable[[Path, Path], Path] | None = None  # (case dir, setup dir) -> where the hostile file must sit
    judge: Callable[[dict, int, Path], str | None] = refused  # a lie's description, or None
    valid_kinds: tuple[str, ...] = ()  # odd but valid for this reader: it may accept them (counted as accepted)
    skip_kinds: tuple[str, ...] = ()  # valid inputs whose acceptance would start a real engine: not run here


def _sweep_folder(case: Path, setup: Path, document: str) -> Path:
    folder = case / "sweep"
    shutil.copytree(setup / "sweep", folder, symlinks=True)
    target = folder / document
    target.unlink(missing_ok=True)
    return target


def _evidence_folder(case: Path, setup: Path) -> Path:
    folder = case / "evidence"
    shutil.copytree(EVIDENCE, folder)
    (folder / "evidence.json").unlink()
    return folder / "evidence.json"


def _script(name: str) -> list[str]:
    return [sys.executable, str(SCRIPTS / f"{name}.py")]


SURFACES = (
    Surface("trace hotspots", lambda f, w: [*_script("analyze_trace"), "hotspots", str(f)]),
    Surface("trace compare", lambda f, w: [*_script("analyze_trace"), "compare", str(TRACE), str(f)]),
    Surface("trace classify", lambda f, w: [*_script("analyze_trace"), "classify", str(f)]),
    Surface("perf dump (baseline)", lambda f, w: [*_script("compare_perf"), str(f), str(PERF)]),
    Surface("perf dump (group)", lambda f, w: [*_script("compare_perf"), "--baseline", str(PERF), str(PERF),
                                               "--candidate", str(f), str(PERF)]),
    Surface("engine log", lambda f, w: [*_script("judge_run"), "--log", str(f), "--preset", "tiny-flux-cpu"],
            judge=judged_invalid),
    Surface("judged perf dump", lambda f, w: [*_script("judge_run"), "--log", str(LOG), "--perf-dump", str(f),
                                              "--preset", "tiny-flux-cpu"], judge=judged_invalid),
    Surface("bench report", lambda f, w: [*_script("render_bench_report"), str(f), "--output-dir", str(w / "out")]),
    Surface("baseline report", lambda f, w: [*_script("compare_engine_baseline"), "--report", str(f)]),
    Surface("baseline perf dump", lambda f, w: [*_script("compare_engine_baseline"), "--perf-dump", str(f)]),
    Surface("cache ledger", lambda f, w: [*_script("cleanup_model_cache"), "verify", "--ledger", str(f)]),
    Surface("request manifest", lambda f, w: [*_script("bench_diffusion_denoise"), "--model", "tiny-flux-cpu",
                                              "--campaign", "aa", "--rounds", "1", "--requests-file", str(f),
                                              "--engine-capabilities", "recent", "--label", "hostile",
                                              "--output-dir", str(w / "out"), "--dry-run"], judge=plan_refused,
            valid_kinds=("jsonl_line_separator",)),  # U+2028 and U+0085 inside a prompt are text, not line ends
    Surface("serving manifest", lambda f, w: [*_script("bench_diffusion_serving"), "--model", "tiny-flux-cpu",
                                              "--requests", "1", "--request-rate", "1", "--requests-file", str(f),
                                              "--output-dir", str(w / "out")],
            skip_kinds=("jsonl_line_separator",)),
    Surface("sweep spec", lambda f, w: [*_script("sweep_diffusion"), "plan", str(f)]),
    Surface("sweep.json", lambda f, w: [*_script("sweep_diffusion"), "status", "--folder", str(f.parent)],
            lambda case, setup: _sweep_folder(case, setup, "sweep.json")),
    Surface("state.json", lambda f, w: [*_script("sweep_diffusion"), "status", "--folder", str(w / "sweep")],
            lambda case, setup: _sweep_folder(case, setup, f"shards/{_first_shard(setup)}/state.json"),
            shard_not_done),
    Surface("result.json", lambda f, w: [*_script("sweep_diffusion"), "merge", "--folder", str(w / "sweep")],
            lambda case, setup: _sweep_folder(case, setup, f"shards/{_first_shard(setup)}/result.json"),
            shard_not_done),
    Surface("evidence.json", lambda f, w: [*_script("collect_pr_evidence"), "verify", str(f.parent)],
            _evidence_folder),
)


# Hostile values on the command line and in the environment: each case is (name, script, argv, extra env); {case}
# in an argument is the case's own directory, where the canary file lies.
_BENCH = ("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--dry-run", "--label", "flags")
FLAG_CASES: tuple[tuple[str, tuple[str, ...], dict[str, str]], ...] = (
    ("rounds 0", (*_BENCH, "--campaign", "aa", "--rounds", "0"), {}),
    ("rounds 5001 digits", (*_BENCH, "--campaign", "aa", "--rounds", "9" * 5001), {}),
    ("samples -1", (*_BENCH, "--samples", "-1"), {}),
    ("samples past the cell bound", (*_BENCH, "--campaign", "aa", "--rounds", "50", "--samples", "1000"), {}),
    ("threshold nan", (*_BENCH, "--campaign", "aa", "--threshold-pct", "nan"), {}),
    ("threshold inf", (*_BENCH, "--campaign", "aa", "--threshold-pct", "inf"), {}),
    ("cell timeout -inf", (*_BENCH, "--cell-timeout-s", "-inf"), {}),
    ("label 5000 characters", ("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--dry-run", "--label",
                               "a" * 5000), {}),
    ("label with a slash", ("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--dry-run", "--label",
                            "../../etc"), {}),
    ("unknown preset", ("bench_diffusion_denoise", "--model", "no-such-model", "--dry-run"), {}),
    ("extra args unterminated", (*_BENCH, "--extra-args", "--x 'unterminated"), {}),
    ("arm args without ab", (*_BENCH, "--arm-b-args=--x 1"), {}),
    ("override unknown field", (*_BENCH, "--override", "colour=red"), {}),
    ("override width nan", (*_BENCH, "--override", "width=nan"), {}),
    ("model path /", ("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--model-path", "/", "--label", "flags",
                      "--engine-capabilities", "recent", "--output-dir", "{case}/out"), {}),  # a dry run only warns
    ("engine version 5000 digits", ("judge_run", "--log", str(LOG), "--engine-version", "1" * 5000), {}),
    ("judge size nonsense", ("judge_run", "--log", str(LOG), "--size", "64xx64"), {}),
    ("judge exit code 10^30", ("judge_run", "--log", str(LOG), "--exit-code", "1" + "0" * 30), {}),
    ("compare resamples 0", ("compare_perf", str(PERF), str(PERF), "--resamples", "0"), {}),
    ("compare threshold -1", ("compare_perf", str(PERF), str(PERF), "--threshold-pct", "-1"), {}),
    ("compare one dump", ("compare_perf", str(PERF)), {}),
    ("trace top 0", ("analyze_trace", "hotspots", str(TRACE), "--top", "0"), {}),
    ("trace top 10^30", ("analyze_trace", "hotspots", str(TRACE), "--top", "1" + "0" * 30), {}),
    ("readiness hub timeout nan", ("check_readiness", "--model", "tiny-flux-cpu", "--hub-timeout-s", "nan"), {}),
    ("readiness malformed HF_ENDPOINT", ("check_readiness", "--model", "tiny-flux-cpu"),
     {"HF_ENDPOINT": "http://[::1"}),
    ("readiness HF_ENDPOINT with a nonnumeric port",
     ("check_readiness", "--model", "flux", "--engine-capabilities", "recent", "--hub-timeout-s", "2"),
     {"HF_ENDPOINT": "http://[::1]:x"}),
    ("readiness HF_ENDPOINT with a space", ("check_readiness", "--model", "flux", "--engine-capabilities", "recent",
                                            "--hub-timeout-s", "2"), {"HF_ENDPOINT": "http://127.0.0.1:1/a b"}),
    ("env inspect malformed HF_ENDPOINT", ("diffusion_skill_env", "inspect"), {"HF_ENDPOINT": "http://[::1"}),
    ("cache preflight model /", ("cleanup_model_cache", "preflight", "--model", "/", "--cache-dir", "{case}"), {}),
    ("cache cleanup outside a root", ("cleanup_model_cache", "cleanup", "--root", "{case}", "--child", "canary.txt",
                                      "--ledger", "{case}/ledger.jsonl"), {}),  # {case} holds the canary file
    ("cache cleanup of the root's parent", ("cleanup_model_cache", "cleanup", "--root", "{case}", "--child", "..",
                                            "--ledger", "{case}/ledger.jsonl"), {}),
    ("sweep status of /", ("sweep_diffusion", "status", "--folder", "/"), {}),
    ("sweep merge of /etc", ("sweep_diffusion", "merge", "--folder", "/etc"), {}),
    ("evidence verify of /", ("collect_pr_evidence", "verify", "/"), {}),
    ("serving rate -1", ("bench_diffusion_serving", "--model", "tiny-flux-cpu", "--request-rate", "-1"), {}),
    ("serving concurrency 0", ("bench_diffusion_serving", "--model", "tiny-flux-cpu", "--concurrency", "0"), {}),
)


def run_flag_case(name: str, argv: tuple[str, ...], env_extra: dict[str, str], work: Path, hang_s: float) -> dict:
    case = work / "flags" / name.replace(" ", "_").replace("/", "_")
    arguments = [a.replace("{case}", str(case)) for a in argv[1:]]
    return _run(Surface(f"flags: {name}", lambda f, w: []), "flag", [*_script(argv[0]), *arguments, "--json"],
                env_extra, case, Path(), hang_s)


def _first_shard(setup: Path) -> str:
    return (setup / "first-shard").read_text(encoding="utf-8")


def prepare_setup(setup: Path) -> None:
    """A sweep folder of the CPU sample spec whose first shard says done, for the folder surfaces to damage."""
    plan = subprocess.run([*_script("sweep_diffusion"), "plan", str(CPU_SPEC), "--json"], capture_output=True,
                          text=True, check=False)
    shard = json.loads(plan.stdout)["shards"][0]
    sys.path.insert(0, str(SCRIPTS))
    from sgl_diffusion_bench.sweep import state

    folder = setup / "sweep"
    import yaml

    state.prepare(folder, "hostile", yaml.safe_load(CPU_SPEC.read_text(encoding="utf-8")))
    result = state.shard_dir(folder, shard["id"]) / "result.json"
    result.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "bench-report" / "example.json", result)
    digest = "sha256:" + hashlib.sha256(result.read_bytes()).hexdigest()
    state.write_state(folder, shard["id"], {"status": "done", "hash": shard["hash"], "attempt": 1,
                                            "result_sha256": digest})
    (setup / "first-shard").write_text(shard["id"], encoding="utf-8")


def _done_state_for(target: Path) -> None:
    """A damaged result.json still gets a state whose hash matches it: the check that remains is the reader's."""
    if target.name != "result.json" or not target.is_file() or target.is_symlink():
        return
    state_file = target.parent / "state.json"
    state = json.loads(state_file.read_text(encoding="utf-8"))
    state["result_sha256"] = "sha256:" + hashlib.sha256(target.read_bytes()).hexdigest()
    state_file.write_text(json.dumps(state), encoding="utf-8")


def run_case(surface: Surface, kind: str, work: Path, setup: Path, hang_s: float) -> dict:
    case = work / f"{surface.name.replace(' ', '_')}--{kind}".replace("/", "_").replace("(", "").replace(")", "")
    case.mkdir()
    target = surface.place(case, setup) if surface.place else case / "input.json"
    hostile = HOSTILE[kind](target)
    if hostile != target and surface.place:  # a device or /proc path stands in place of the folder's document
        target.symlink_to(hostile)
        hostile = target
    _done_state_for(hostile)
    row = _run(surface, kind, surface.argv(hostile, case) + ["--json"], {}, case, setup, hang_s)
    shutil.rmtree(case, ignore_errors=True)
    return row


def _run(surface: Surface, kind: str, argv: list[str], env_extra: dict[str, str], case: Path, setup: Path,
         hang_s: float) -> dict:
    case.mkdir(parents=True, exist_ok=True)
    canary = case / "canary.txt"
    canary.write_text("a file the tools did not make", encoding="utf-8")
    env = {**os.environ, "HF_TOKEN": CANARY_TOKEN, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(SCRIPTS), **env_extra}
    started = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=hang_s)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, 9)
        stdout, stderr = child.communicate()
        hung = True
    wall = time.monotonic() - started
    out, err = stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
    outcome, detail = classify(surface, kind, setup, child.returncode, out, err, hung)
    if outcome in ("refused", "accepted") and (CANARY_TOKEN in out or CANARY_TOKEN in err):
        outcome, detail = "leak", "the canary token was printed"
    if outcome in ("refused", "accepted") and not canary.exists():
        outcome, detail = "lost_file", "the canary file beside the input is gone"
    return {"surface": surface.name, "kind": kind, "outcome": outcome, "exit_code": child.returncode,
            "wall_s": round(wall, 2), "detail": detail}


def classify(surface: Surface, kind: str, setup: Path, returncode: int, out: str, err: str,
             hung: bool) -> tuple[str, str]:
    if hung:
        return "hang", "killed after the hang bound"
    if "Traceback (most recent call last)" in err or "Traceback (most recent call last)" in out:
        return "traceback", err[err.find("Traceback"):][:300]
    try:
        document = json.loads(out)
    except ValueError:
        return "bad_output", f"stdout is not one JSON document: {out[:120]!r}"
    if not isinstance(document, dict) or "schema" not in document:
        return "bad_output", "the document names no schema"
    if returncode == 70:
        return "exit_70", str(document.get("error", {}).get("message", ""))[:300]
    lie = surface.judge(document, returncode, setup)
    if lie and kind in surface.valid_kinds:
        return "accepted", f"exit {returncode}: a valid input this reader accepts"
    if lie:
        return "lie", f"{lie}: exit {returncode}, ok {document.get('ok')!r}, schema {document['schema']}"
    if document["schema"] == "error.v1" and document.get("exit_code") != returncode:
        return "bad_output", f"error.v1 says exit {document.get('exit_code')}, the process exited {returncode}"
    code = document["error"].get("code") if document["schema"] == "error.v1" else \
        ", ".join([document["schema"], *(r.get("code", "") for r in document.get("refusals", []))])
    return "refused", f"exit {returncode}: {code}"


def run_all(surfaces: list[Surface], kinds: list[str], flags: list, *, parallel: int = 2,
            hang_s: float = 60.0) -> list[dict]:
    """Every (surface, kind) case and every flag case, ``parallel`` at a time; a line on stderr for each case that
    is not a clean refusal or acceptance, and every 25 cases."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="hostile-inputs-") as tmp:
        work, setup = Path(tmp) / "cases", Path(tmp) / "setup"
        work.mkdir()
        setup.mkdir()
        prepare_setup(setup)
        cases = [(s, k) for s in surfaces for k in kinds if k not in s.skip_kinds]
        print(f"[hostile] {len(cases) + len(flags)} cases: {len(surfaces)} surfaces x {len(kinds)} hostile kinds "
              f"(less those a reader must accept and would then run), and {len(flags)} hostile flags or environments",
              file=sys.stderr)
        with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
            futures = [pool.submit(run_case, s, k, work, setup, hang_s) for s, k in cases]
            futures += [pool.submit(run_flag_case, *c, work, hang_s) for c in flags]
            for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
                row = future.result()
                rows.append(row)
                if row["outcome"] not in ("refused", "accepted") or n % 25 == 0:
                    print(f"[hostile] {n}/{len(futures)} {row['surface']} / {row['kind']}: {row['outcome']} "
                          f"({row['detail'][:160]})", file=sys.stderr)
    return sorted(rows, key=lambda r: (r["surface"], r["kind"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--hang-s", type=float, default=60.0)
    parser.add_argument("--only", nargs="+", metavar="SURFACE", help="surface names to run, or flags (default: all)")
    parser.add_argument("--kinds", nargs="+", metavar="KIND", help="hostile kinds to run (default: all)")
    parser.add_argument("--json", action="store_true", help="print every case and the counts as one JSON document")
    args = parser.parse_args()
    surfaces = [s for s in SURFACES if not args.only or s.name in args.only]
    kinds = [k for k in HOSTILE if not args.kinds or k in args.kinds]
    flags = [c for c in FLAG_CASES if not args.only or "flags" in args.only]
    started = time.monotonic()
    rows = run_all(surfaces, kinds, flags, parallel=args.parallel, hang_s=args.hang_s)
    counts = {outcome: sum(r["outcome"] == outcome for r in rows) for outcome in OUTCOMES}
    wall = time.monotonic() - started
    print(f"[hostile] {len(rows)} cases in {wall:.0f} s: " + ", ".join(f"{k} {v}" for k, v in counts.items()),
          file=sys.stderr)
    if args.json:
        print(json.dumps({"benchmark": "hostile_inputs", "cases": len(rows), "wall_s": round(wall, 1),
                          "hang_s": args.hang_s, "counts": counts, "rows": rows}, indent=1))
    return 0 if counts["refused"] + counts["accepted"] == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
