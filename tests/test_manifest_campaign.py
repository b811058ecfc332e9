"""Campaigns over a request manifest (--requests-file): every slot sends each manifest request in file order, each
cell records which request and shape it ran, and each request gets its own change, interval, verdict and output
identity. One real warm A/A campaign over the shipped 6-request mixed-shape manifest on the tiny CPU engine serves the
engine tests; a line the engine would reject is refused before anything starts, naming the line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import SCRIPTS, run_script
from sgl_diffusion_bench import contract
from sgl_diffusion_bench.campaign import design
from sgl_diffusion_bench.results import request_verdicts, stats, terminal
from sgl_diffusion_bench.judging.cell import Cell

SAMPLE = SCRIPTS / "sgl_diffusion_bench" / "data" / "sample_requests.jsonl"
LINES = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
VERDICTS = {"improved", "regressed", "no_significant_change", "insufficient_data", "outputs_differ"}
RUN = ("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "aa", "--rounds", "2",  # the doc's example
       "--requests-file", str(SAMPLE), "--engine", "warm", "--report")


def _steps(line: dict) -> int:
    return line.get("num_inference_steps") or line["sampling_params"]["num_inference_steps"]


@pytest.fixture(scope="module")
def manifest_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("manifest")
    run = run_script(*RUN, "--label", "mf", "--output-dir", str(out), "--json", timeout=1800)
    assert run.returncode == 0 and run.document["ok"], run.stderr[-3000:]
    return run


@pytest.mark.engine
def test_every_slot_sends_the_manifest_in_file_order_on_one_engine(manifest_run):
    doc = manifest_run.document
    cells = doc["cells"]
    assert len(cells) == 2 * 4 * len(LINES) and all(c["status"] == "valid" for c in cells)
    for start in range(0, len(cells), len(LINES)):  # each slot: the six requests, in order, in one arm and position
        block = cells[start:start + len(LINES)]
        assert [c["request"]["request_id"] for c in block] == [line["request_id"] for line in LINES]
        assert len({(c["arm"], c["round"], c["position"]) for c in block}) == 1
    assert len({c["perf_dump_path"] for c in cells}) == len(cells)
    engines = doc["engines"]
    start, = engines["starts"]
    assert engines["engine_starts"] == 1 and start["warmup_requests"] == len(LINES)  # each request warmed once
    manifest = doc["campaign"]["manifest"]
    assert manifest["sha256"] == hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    assert manifest["parser"] == "multimodal_gen/benchmarks/request_manifest.py" and len(manifest["requests"]) == 6
    assert [o["position"] for o in doc["campaign"]["order"]] == ["A1", "B1", "B2", "A2"] * 2


@pytest.mark.engine
def test_each_cell_ran_its_requests_shape_and_fields(manifest_run):
    from PIL import Image

    for cell in manifest_run.document["cells"]:
        line = LINES[cell["request"]["index"]]
        request = cell["request"]
        assert (request["width"], request["height"], request["num_inference_steps"], request["line"]) == \
            (line["width"], line["height"], _steps(line), cell["request"]["index"] + 1)
        argv = cell["argv"]
        assert f"--prompt={line['prompt']}" in argv and f"--seed={line['seed']}" in argv
        if "negative_prompt" in line:
            assert f"--negative-prompt={line['negative_prompt']}" in argv
        if "sampling_params" in line:
            assert "--guidance-scale=3.5" in argv
        dump = json.loads(Path(cell["perf_dump_path"]).read_text())
        assert len(dump["denoise_steps_ms"]) == _steps(line)  # the engine ran this request's step count
        output, = cell["outputs"]
        with Image.open(output["path"]) as image:
            assert image.size == (line["width"], line["height"])


@pytest.mark.engine
def test_outputs_are_checked_per_request_the_same_bytes_in_both_arms(manifest_run):
    doc = manifest_run.document
    checks = doc["summary"]["output_quality"]["checks"]
    assert sorted(c["request"] for c in checks) == list(range(6)) and all(c["passed"] for c in checks)
    hashes = {}
    for cell in doc["cells"]:
        hashes.setdefault(cell["request"]["index"], set()).add(cell["outputs"][0]["sha256"])
    assert all(len(h) == 1 for h in hashes.values())  # within a request: one image, whichever arm
    assert len(set.union(*hashes.values())) == 6  # across requests: six images (so a campaign-wide check would fail)
    assert all(r["outputs_identical"] is True and r["outputs_passed"] is True for r in doc["summary"]["requests"])


@pytest.mark.engine
def test_each_request_has_its_own_change_interval_and_verdict_by_the_campaigns_rule(manifest_run):
    doc = manifest_run.document
    comparison = doc["summary"]["comparison"]
    entries = doc["summary"]["requests"]
    assert [e["request_id"] for e in entries] == [line["request_id"] for line in LINES]
    cells = [Cell.from_json(c) for c in doc["cells"]]
    boot = comparison["bootstrap"]
    for entry in entries:
        mine = [c for c in cells if c.request["index"] == entry["index"]]
        assert entry["cells"] == [c.index for c in mine] and len(mine) == 8
        again = stats.metric_change(mine, "a", "a-again", "e2e_ms", threshold_pct=comparison["threshold_pct"],
                                    resamples=boot["resamples"], seed=boot["seed"], confidence=boot["confidence"],
                                    min_rounds=comparison["min_rounds"], exclude=comparison["discarded_cells"])
        assert entry["change"] == again and entry["change"]["verdict"] in VERDICTS
        assert entry["change"]["baseline_mean"] > 0 and entry["change"]["candidate_mean"] > 0
        assert len(entry["change"]["round_changes_pct"]) == 2
    assert {e["shape"] for e in entries} >= {"64x64, 2 steps", "128x64, 2 steps", "64x128, 2 steps",
                                             "64x64, 4 steps", "128x128, 2 steps", "128x64, 3 steps"}


@pytest.mark.engine
def test_the_report_has_the_shapes_faster_slower_table(manifest_run):
    doc = manifest_run.document
    markdown = Path(doc["artifacts"]["report_md"]).read_text()
    section = markdown[markdown.index("### Per request"):]
    assert "| Outcome | Shapes (request, change) |" in section
    for label in ("faster", "slower", "no clear change", "no verdict"):
        assert f"\n| {label} | " in section
    for entry in doc["summary"]["requests"]:  # each request in its outcome's row and in its own detail row
        row = next(line for line in section.splitlines() if line.startswith(f"| {request_verdicts.outcome(entry)} |"))
        assert f"`{entry['request_id']}`" in row
        assert f"| {entry['index'] + 1} | `{entry['request_id']}` | {entry['line']} | {entry['shape']} |" in section
    text = terminal.render_campaign_text(doc)  # what a run without --json prints
    assert all(f"requests {label}: " in text for label in ("faster", "slower", "no clear change", "no verdict"))


# -- bad input: refused before anything starts --------------------------------------------------------------------

@pytest.mark.parametrize("line, says", [
    ('{"prompt": "a cat", "width": 0, "height": 64}', "width must be a positive integer"),
    ('{"prompt": "a cat", "colour": "red"}', "unsupported field(s): colour"),
    ('{"prompt": "a cat", "width": 60, "height": 64}', "not a multiple of 8"),
    ('{"prompt": "a cat", "sampling_params": {"true_cfg_scale": 4}}', "true_cfg_scale: a campaign request sets only"),
])
@pytest.mark.torch  # the manifest is read by the engine's own parser
def test_a_manifest_line_the_engine_would_reject_is_refused_naming_it(tmp_path, line, says):
    manifest = tmp_path / "requests.jsonl"
    manifest.write_text("\n".join(SAMPLE.read_text().splitlines()[:2] + [line]) + "\n")
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "aa", "--requests-file",
                     str(manifest), "--label", "bad", "--output-dir", str(tmp_path / "out"), "--json")
    assert run.returncode == 2, run.stderr[-2000:]
    error = run.document["error"]
    assert error["code"] == "input.bad_manifest" and error["details"]["line"] == 3
    assert "line 3" in error["message"] and says in error["message"] and "nothing was started" in error["message"]
    assert not (tmp_path / "out").exists() and "[engine" not in run.stderr and "probe" not in run.stderr.lower()


@pytest.mark.torch  # the manifest is read by the engine's own parser
def test_the_plan_sends_each_request_in_every_slot_with_its_own_run_id(tmp_path):
    run = run_script("bench_diffusion_denoise", "--model", "tiny-flux-cpu", "--campaign", "ab", "--rounds", "1",
                     "--arm-b-args=--log-level info", "--requests-file", str(SAMPLE), "--engine-capabilities",
                     "recent", "--label", "plan", "--output-dir", str(tmp_path), "--dry-run", "--json")
    runs = run.document["runs"]
    assert len(runs) == 4 * 6 and len({r["run_id"] for r in runs}) == 24 and runs[5]["run_id"].endswith("__q006")
    def request_of(r):
        return [t for t in r["argv"] if t.startswith(("--prompt=", "--seed=", "--width=", "--height=", "--num-"))]
    assert [request_of(r) for r in runs[:6]] == [request_of(r) for r in runs[6:12]]  # B1 sends what A1 sent
    assert [next(t for t in r["argv"] if t.startswith("--width=")) for r in runs[:6]] == \
        [f"--width={line['width']}" for line in LINES]


def _manifest(requests: int):
    from sgl_diffusion_bench.engine import request_manifest

    specs = tuple(request_manifest.RequestSpec(f"r{n}", "p", 64, 64, {}) for n in range(requests))
    return request_manifest.Manifest(SAMPLE, "0" * 64, specs)


def test_a_plan_past_the_cell_bound_is_refused_before_a_slot_is_built():
    """A 10^5-line manifest in an A/A campaign is 400,000 cells: refused at once, naming the bound and the split."""
    with pytest.raises(contract.UsageError) as refused:
        design.plan("aa", rounds=1, manifest=_manifest(100_000))
    assert refused.value.code == "usage.too_many_cells"
    assert "400000 cells (4 positions x 1 rounds x 1 samples x 100000 manifest requests)" in refused.value.message
    assert f"at most {design.MAX_CELLS}" in refused.value.message and "at most 2500 lines" in refused.value.hint
    fits = design.plan("aa", rounds=1, manifest=_manifest(design.MAX_CELLS // 4))  # the bound itself plans
    assert len(fits.slots) == design.MAX_CELLS
    with pytest.raises(contract.UsageError, match="1 positions x 1 rounds x 10001 samples"):
        design.plan("single", samples=design.MAX_CELLS + 1)
    with pytest.raises(contract.UsageError, match="24 positions x 50 rounds x 10 samples"):
        design.plan("matrix", rounds=50, samples=10, engine_qualities=["low", "medium", "high", "max", "x", "y"])


def test_the_plan_orders_requests_within_each_position():
    from sgl_diffusion_bench.engine import request_manifest

    specs = tuple(request_manifest.RequestSpec(f"r{n}", "p", 64, 64, {}) for n in range(3))
    plan = design.plan("abba", rounds=1, samples=2, manifest=request_manifest.Manifest(SAMPLE, "0" * 64, specs))
    assert [(s.position, s.request, s.sample) for s in plan.slots[:7]] == [
        ("A1", 0, 1), ("A1", 0, 2), ("A1", 1, 1), ("A1", 1, 2), ("A1", 2, 1), ("A1", 2, 2), ("B1", 0, 1)]
    assert [s.index for s in plan.slots] == list(range(24)) and len(plan.to_json()["order"]) == 4


# -- the per-request verdicts themselves (pure) --------------------------------------------------------------------

def _cells(changes: dict[int, float], differ: int | None = None) -> list[Cell]:
    """Two A/B/B/A rounds per request; arm b is ``changes[request]`` times arm a, with a little noise."""
    cells: list[Cell] = []
    for r in (1, 2):
        for arm, position in (("a", "A1"), ("b", "B1"), ("b", "B2"), ("a", "A2")):
            for q, factor in changes.items():
                e2e = 100.0 * (factor if arm == "b" else 1.0) + (len(cells) % 3) * 0.1
                sha = ("f" if arm == "b" and q == differ else "a") * 63 + str(q)
                cells.append(Cell(index=len(cells), arm=arm, round=r, position=position, status="valid",
                                  perf={"e2e_ms": e2e, "denoise_ms": e2e / 2, "stages": {}},
                                  outputs=[{"path": f"/o/{len(cells)}.png", "sha256": sha}],
                                  request={"index": q, "request_id": f"req-{q}", "line": q + 1, "width": 64 * (q + 1),
                                           "height": 64, "num_frames": None, "num_inference_steps": 2}))
    return cells


def _summary(cells: list[Cell]) -> dict:
    from sgl_diffusion_bench.judging import quality, validity

    arms = {"a": {"quality": "exact"}, "b": {"quality": "exact"}}
    output_quality = validity.apply_output_checks(cells, arms, "a", ["exact", "lossless", "high"])
    summary = stats.summarize(cells, ["a", "b"], "a", "b")
    summary["requests"] = request_verdicts.per_request(cells, summary["comparison"], output_quality, "e2e_ms")
    assert quality.outputs_differ(output_quality) == any(r["outputs_identical"] is False for r in summary["requests"])
    return summary


def test_a_faster_a_slower_and_an_unchanged_shape_each_get_their_own_verdict():
    summary = _summary(_cells({0: 0.8, 1: 1.25, 2: 1.0}))
    verdicts = [r["change"]["verdict"] for r in summary["requests"]]
    assert verdicts == ["improved", "regressed", "no_significant_change"]
    assert [round(r["change"]["change_pct"]) for r in summary["requests"]] == [-20, 25, 0]
    assert all(r["change"]["ci_low_pct"] <= r["change"]["change_pct"] <= r["change"]["ci_high_pct"]
               for r in summary["requests"])
    table = request_verdicts.markdown(summary, {"path": "m.jsonl", "sha256": "0" * 64, "parser": "p.py"})
    assert "| faster | 64x64, 2 steps (`req-0`, -20.00%) |" in table
    assert "| slower | 128x64, 2 steps (`req-1`, +24.98%) |" in table
    assert "| no clear change | 192x64, 2 steps (`req-2`, " in "\n".join(table) and "| no verdict | - |" in table


def test_a_request_whose_outputs_differ_between_arms_has_no_speedup():
    summary = _summary(_cells({0: 0.8, 1: 0.8}, differ=1))
    first, second = summary["requests"]
    assert first["outputs_identical"] is True and first["change"]["verdict"] == "improved"
    assert second["outputs_identical"] is False and second["change"]["verdict"] == "outputs_differ"
    assert request_verdicts.outcome(second) == "no verdict"
