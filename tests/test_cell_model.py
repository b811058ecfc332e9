"""The typed cell/report model: every bench-report the tools wrote (the fixtures: the seed PR's campaign, the H200
runs of 0.5.10 and 0.5.23) reads into Cells and writes back to the same JSON, which the schema accepts; a cell judged
by the real request path from a recorded CPU engine run does too."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from PIL import Image

from conftest import TEST_FIXTURES
from sgl_diffusion_bench import contract
from sgl_diffusion_bench.judging import host_load, log_gates, log_markers, memory_evidence, output_check, request_path
from sgl_diffusion_bench.judging.cell import Cell, Report

REPORTS = sorted(p for p in TEST_FIXTURES.rglob("*.json") if b'"schema": "bench-report.v1"' in p.read_bytes())


EXAMPLE = TEST_FIXTURES / "bench-report" / "example.json"
CELL_SCHEMA = Draft202012Validator({"$ref": contract.SCHEMA_BASE_URI + "bench-report.v1.schema.json#/$defs/cell"},
                                   registry=contract._registry())


def cell_errors(doc: dict) -> list[str]:
    """Schema errors of one cell against bench-report.v1's own cell definition."""
    return [e.message for e in CELL_SCHEMA.iter_errors(doc)]


def test_the_fixtures_hold_every_kind_of_report():
    names = {p.relative_to(TEST_FIXTURES).parts[0] for p in REPORTS}
    assert {"bench-report", "gpu-h200-0.5.10", "gpu-h200-0.5.23"} <= names  # cold, and warm (cells with engine)


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.relative_to(TEST_FIXTURES)))
def test_every_fixture_report_round_trips_and_stays_schema_valid(path):
    doc = json.loads(path.read_text())
    report = Report.from_json(doc)
    assert [type(c) for c in report.cells] == [Cell] * len(doc["cells"]) and report.cells
    for raw, cell in zip(doc["cells"], report.cells, strict=True):
        assert cell.extra == {}  # the model names every property the tools wrote
        assert cell.to_json() == raw
        assert cell_errors(cell.to_json()) == []
        assert Cell.from_json(cell.to_json()) == cell
    assert report.to_json() == doc
    assert contract.validation_errors(report.to_json()) == []


def test_the_model_names_exactly_the_schema_cell_properties():
    cell_schema = contract.load_schema("bench-report.v1")["$defs"]["cell"]
    assert {f.name for f in dataclasses.fields(Cell)} - {"extra"} == set(cell_schema["properties"])
    # a new cell writes the required properties (and returncode, which every report has carried), no optional one
    assert set(Cell(index=0, arm="a").to_json()) == set(cell_schema["required"]) | {"returncode"}
    top = contract.load_schema("bench-report.v1")["properties"]
    assert {f.name for f in dataclasses.fields(Report)} - {"extra"} == set(top) - {"schema"}


def test_a_new_cell_is_a_schema_valid_skipped_cell():
    cell = Cell(index=0, arm="a", round=1, position="A1", perf_dump_path="/x/perf.json", sample=2)
    doc = cell.to_json()
    assert doc["status"] == "skipped" and doc["returncode"] is None and doc["sample"] == 2
    assert "engine" not in doc and "quality" not in doc  # optional properties are left out until set
    assert cell_errors(doc) == []


def test_a_misspelt_attribute_fails_at_once():
    cell = Cell(index=0, arm="a")
    for misspelt in ("stauts", "e2e_ms", "round_"):
        with pytest.raises(AttributeError):
            setattr(cell, misspelt, "valid")  # slots: a misspelt name never becomes a silent new attribute
    with pytest.raises(TypeError):
        Cell(index=0, arm="a", stauts="valid")


def test_an_unknown_key_is_kept_written_back_and_refused_by_the_schema():
    """A report from a newer writer stays readable and loses nothing; the schema still refuses it on output."""
    raw = json.loads(EXAMPLE.read_text())
    raw["cells"][0]["stauts"] = "valid"
    raw["future_block"] = {"x": 1}
    report = Report.from_json(raw)
    assert report.cells[0].extra == {"stauts": "valid"} and report.extra == {"future_block": {"x": 1}}
    assert report.to_json() == raw
    assert any("stauts" in e for e in cell_errors(report.cells[0].to_json()))


def test_a_cell_without_index_or_another_schema_is_refused():
    with pytest.raises(ValueError, match="index"):
        Cell.from_json({"arm": "a"})
    with pytest.raises(ValueError, match="bench-report.v1"):
        Report.from_json({"schema": "compare.v1"})
    with pytest.raises(ValueError, match="needs .*summary"):
        Report.from_json({key: value for key, value in json.loads(EXAMPLE.read_text()).items() if key != "summary"})


def test_the_json_is_a_copy():
    raw = json.loads(EXAMPLE.read_text())["cells"][0]
    cell = Cell.from_json(raw)
    cell.reasons.append("changed")
    cell.to_json()["outputs"].clear()
    assert raw["reasons"] == [] and cell.outputs  # neither side aliases the other


@pytest.mark.parametrize("scenario, status", [("native-ok", "valid"), ("unresolved-backend-sglang", "failed")])
def test_a_cell_judged_from_a_recorded_cpu_engine_run_round_trips(tmp_path, scenario, status):
    """The real request path on a recorded tiny-FLUX CPU run of sglang 0.5.23 (log, perf dump, exit code)."""
    recorded = TEST_FIXTURES / "engine-cpu-0.5.23" / scenario
    run = json.loads((recorded / "run.json").read_text())
    if (recorded / "perf.json").is_file():
        shutil.copy(recorded / "perf.json", tmp_path / "perf.json")
        Image.new("RGB", (64, 64)).save(tmp_path / "out.png")  # the recorded request's size
    log = (recorded / "log.txt").read_text()
    verdict = log_gates.scan_log(log, log_markers.markers_for_version("0.5.23"), require_native=True)
    cell = Cell(index=0, arm="a", argv=["sglang", "generate", "--width=64", "--height", "64"],
                perf_dump_path=str(tmp_path / "perf.json"))
    request_path.finish_cell(cell, verdict=verdict, returncode=run["returncode"], stop_reason=run["stop_reason"],
                             stop_line=None, stopped_after_s=run["stopped_after_s"], wall_s=run["wall_s"],
                             perf_dump_path=Path(cell.perf_dump_path), output_dir=tmp_path, output_stem="out",
                             task="t2i", memory_kind=memory_evidence.evidence_of(log.splitlines()).kind,
                             boundary=request_path.Boundary(False, [], [], host_load.sample(), host_load.sample()),
                             requested=output_check.requested_shape(cell.argv))
    assert cell.status == status and (cell.perf is not None) == (status == "valid")
    doc = json.loads(json.dumps(cell.to_json()))  # through real JSON text, as a report file is
    assert Cell.from_json(doc) == cell and Cell.from_json(doc).to_json() == doc
    assert cell_errors(doc) == []
