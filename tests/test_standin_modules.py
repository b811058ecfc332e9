"""A figure made on a stand-in module never passes as a real one: the log gate names every module a process served
from a stand-in (the GPU harness's `[gpu-harness]` lines and the reference recipe's `[sglgpu23]` lines), judge_run and
the campaign report say so, and a kept GPU fixture made with stand-ins is one the fixture README declares."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench.judging import log_gates, log_markers
from sgl_diffusion_bench.results import report

H200 = TEST_FIXTURES / "gpu-h200-0.5.23"
MARKERS = log_markers.markers_for_version("0.5.23")
HARNESS_STANDINS = ("av", "imageio_ffmpeg", "sgl_kernel")
# The GPU fixtures (tests/fixtures/<family>/<entry>) recorded while the engine's own sglang-kernel cannot run on the
# lent machines (its wheel needs torch 2.14.1; the machines carry 2.11): every one ran on stand-ins, each is declared
# in its README. A fixture kept once it can must have none.
STANDIN_ERA = {"gpu-h200-0.5.10/cell-a-r01p01.engine.log", "gpu-h200-0.5.10/profile.engine.log",
               *(f"gpu-h200-0.5.23/{name}" for name in (
                   "bcg-capture-failed", "campaign", "direct-pair", "evidence-at-launch", "evidence-at-launch-run.err",
                   "evidence-at-launch-verified", "evidence-folder", "evidence-run.err", "profile-pair",
                   "reference-at-launch", "reference-same-boot", "serving", "warm-vs-cold", "wan-t2v-no-cutlass")),
               "gpu-h100-0.5.23/flux2-edit-evidence", "gpu-h100-0.5.23/wan-t2v-evidence"}


def _standins(path: Path) -> tuple[str, ...]:
    return log_gates.scan_log(path.read_text(encoding="utf-8", errors="replace"), MARKERS).standin_modules


def test_both_stand_in_line_forms_are_named_and_a_real_run_has_none():
    harness = _standins(H200 / "campaign" / "warm-e1.engine.log")  # "[gpu-harness] no real 'X' importable: ..."
    recipe = _standins(H200 / "direct-pair" / "eager" / "log.txt")  # "[sglgpu23] no real 'X': using stand-in"
    assert harness == recipe == HARNESS_STANDINS
    verdict = log_gates.scan_log((H200 / "campaign" / "warm-e1.engine.log").read_text(), MARKERS)
    (warning,) = [m for code, m in verdict.warnings if code == "engine.standin_kernels"]
    assert "av, imageio_ffmpeg, sgl_kernel" in warning and "first at log line 1" in warning
    assert verdict.to_json()["standin_modules"] == list(HARNESS_STANDINS)
    real = log_gates.scan_log((TEST_FIXTURES / "engine-cpu-0.5.23" / "native-ok" / "log.txt").read_text(), MARKERS)
    assert real.standin_modules == () and "engine.standin_kernels" not in dict(real.warnings)


def test_judge_run_names_the_stand_ins_its_warm_engine_started_with(tmp_path):
    campaign = H200 / "evidence-at-launch-verified" / "campaign"
    cell, engine = "flux-1gpu__evidence__bcg__r01p02", "flux-1gpu__evidence__warm-e2"
    segment = (campaign / cell / "engine.log").read_text()
    assert "stand-in" not in segment  # the request's own lines do not show them: its engine's start does
    run = run_main("judge_run", "--log", str(campaign / cell / "engine.log"), "--engine-log",
                   str(campaign / engine / "engine.log"), "--engine-version", "0.5.23", "--task", "t2i", "--bcg",
                   "--perf-dump", str(campaign / cell / f"{cell}.perf.json"),
                   "--output", str(H200 / "evidence-output-2c0dbc1f.png"))
    assert run.returncode == 0, run.stderr
    assert "stand-in modules ran, not the real packages: av, imageio_ffmpeg, sgl_kernel" in run.stdout + run.stderr
    doc = run_main("judge_run", "--log", str(campaign / cell / "engine.log"), "--engine-log",
                   str(campaign / engine / "engine.log"), "--engine-version", "0.5.23", "--task", "t2i", "--bcg",
                   "--json").document
    assert doc["standin_modules"] == list(HARNESS_STANDINS)


def test_a_report_whose_engine_started_on_stand_ins_says_so_at_the_top():
    doc = json.loads((H200 / "campaign" / "bench-report.json").read_text())
    assert "Stand-in modules" not in report.render_markdown(doc, plot_name=None)  # recorded before the marker
    doc["engines"]["starts"][0]["standin_modules"] = ["sgl_kernel"]
    text = report.render_markdown(doc, plot_name=None)
    head = text.split("\n| ", 1)[0]  # before the first table
    assert "**Stand-in modules ran instead of the real packages: sgl_kernel**" in head, head
    doc["engines"]["starts"][0].pop("standin_modules")
    doc["cells"][3]["gates"]["log"]["standin_modules"] = ["av"]
    assert "real packages: av**" in report.render_markdown(doc, plot_name=None)


def test_every_fixture_made_with_stand_ins_is_one_its_readme_declares():
    found: dict[str, set[str]] = {}
    for path in sorted(TEST_FIXTURES.rglob("*")):
        text = path.read_text(errors="replace") if path.suffix in (".log", ".txt", ".err") and path.is_file() else ""
        if "no real '" in text:
            entry = "/".join(path.relative_to(TEST_FIXTURES).parts[:2])
            found.setdefault(entry, set()).update(_standins(path))
    assert set(found) <= STANDIN_ERA, f"a new fixture ran on stand-ins: {sorted(set(found) - STANDIN_ERA)}"
    assert all("sgl_kernel" in modules for modules in found.values() if modules != {"av"}), found
    for family in {entry.split("/")[0] for entry in found}:
        readme = (TEST_FIXTURES / family / "README.md").read_text()
        declared = re.search(r"## Made with stand-ins\n(.*?)(\n## |\Z)", readme, re.S)
        assert declared, f"{family}/README.md has no 'Made with stand-ins' section"
        missing = [e for e in found if e.startswith(family + "/") and f"`{e.split('/')[1]}`" not in declared.group(1)]
        assert not missing, missing
