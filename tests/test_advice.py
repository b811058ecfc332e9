"""Every next step names only flags of the command it is advised for: each kind of advice the statistics and the
sequential rule give, in the words of every command, and the next steps of the kept reports and evidence folders,
parsed with that command's own parser."""

from __future__ import annotations

import json
import re

import pytest

from conftest import TEST_FIXTURES
from sgl_diffusion_bench import advice, contract
from sgl_diffusion_bench.campaign import sequential
from sgl_diffusion_bench.results import report, sample_size, stats
from sgl_diffusion_bench.judging.cell import Cell
from sgl_diffusion_bench.cli import bench, compare, evidence

FLAG = re.compile(r"(--[a-z][a-z0-9-]*)(?:[ =]([^\s,;:()\-][^\s,;:()]*))?")
REQUIRED = {advice.BENCH: (bench.build_parser, ["--model", "tiny-flux-cpu"]),
            advice.EVIDENCE: (evidence.build_parser, ["run", "--model", "tiny-flux-cpu", "--out", "x"]),
            advice.COMPARE: (compare.build_parser, [])}


def flags_of(text: str) -> list[str]:
    tokens = []
    for flag, value in FLAG.findall(text):
        tokens += [flag, value] if value else [flag]
    return tokens


def parses(command: str, text: str) -> list[str]:
    """The flags ``text`` names, after ``command``'s parser accepted them (UsageError otherwise)."""
    build, required = REQUIRED[command]
    tokens = flags_of(text)
    build().parse_args([*required, *tokens])
    return tokens


def _cells(cv_pct: float, rounds: int = 2) -> list[Cell]:
    """A/B/B/A rounds with a spread of about ``cv_pct`` around 1000 ms."""
    wobble = [1 - cv_pct / 100, 1 + cv_pct / 100, 1, 1]
    cells = []
    for r in range(rounds):
        for p, arm in enumerate(("A", "B", "B", "A")):
            index = 4 * r + p
            e2e = 1000 * wobble[(index + r) % 4]
            cells.append(Cell(index=index, arm=arm, round=r + 1, position=f"p{p + 1}", status="valid",
                              perf={"e2e_ms": e2e, "denoise_ms": e2e * 0.8, "stages": {}}))
    return cells


def every_advice() -> list[dict]:
    """Each kind the real builders give: too few cells, more rounds, a noisy host; fixed and sequential."""
    found = []
    for cells in (_cells(0.5, rounds=1), _cells(0.5), _cells(40.0)):
        metric = stats.metric_change(cells, "A", "B", "e2e_ms")
        found.append(sample_size.advice_for({**metric, "verdict": "insufficient_data"}))
    rule = sequential.StoppingRule(1.5, 8)
    for spread, cv in ((None, 1.0), (0.8, 1.0), (50.0, 1.0), (0.8, 40.0)):
        found.append(sequential.advice_for(rule, {"verdict": "insufficient_data", "cv_pct": cv,
                                                  "round_change_sd_pct": spread}))
    return found


def test_the_builders_give_every_kind_of_advice():
    kinds = {(a["action"], a["rule"]) for a in every_advice()}
    assert kinds == {("more_rounds", "fixed"), ("quiet_host", "fixed"), ("more_rounds", "until_verdict"),
                     ("quiet_host", "until_verdict")}
    assert all(a["why"] and (a["rounds"] is None) == (a["action"] == "quiet_host") for a in every_advice())


@pytest.mark.parametrize("command", advice.COMMANDS)
def test_every_advised_flag_parses_with_the_command_it_is_advised_for(command):
    named = set()
    for a in every_advice():
        text = advice.render(a, command, samples=2)
        named |= {t for t in parses(command, text) if t.startswith("--")}
        if a["action"] == "quiet_host":
            assert "--" not in text and "pin the engine" in text  # a larger threshold never loosens the CV gate
    expected = {advice.BENCH: {"--rounds", "--until-verdict", "--budget-rounds"},
                advice.EVIDENCE: {"--out", "--budget-requests", "--samples"}, advice.COMPARE: set()}[command]
    assert named == expected


def test_a_flag_the_command_lacks_is_refused_by_the_check():
    with pytest.raises(contract.UsageError):
        parses(advice.EVIDENCE, "re-run with --until-verdict --budget-rounds 12")  # the bench command's words


def test_the_evidence_budget_buys_the_advised_rounds():
    text = advice.render(advice.more_rounds("until_verdict", 12, "why"), advice.EVIDENCE, samples=2)
    assert "--budget-requests 96 (12 A/B/B/A rounds at --samples 2)" in text


EVIDENCE_FOLDERS = sorted(p.parent for p in TEST_FIXTURES.rglob("EVIDENCE.md"))
REPORTS = sorted(p for p in TEST_FIXTURES.rglob("*.json") if '"schema": "bench-report.v1"' in p.read_text())


@pytest.mark.parametrize("folder", EVIDENCE_FOLDERS, ids=lambda p: p.name)
def test_the_next_step_of_every_kept_evidence_folder_parses(folder):
    steps = [line for line in (folder / "EVIDENCE.md").read_text().splitlines() if line.startswith("- Next step:")]
    assert steps, "a kept folder without a verdict states its next step"
    for line in steps:  # more rounds, bought with the evidence command's own flag; or a quieter host, no flag
        flags = parses(advice.EVIDENCE, line)
        assert "--budget-requests" in flags or (flags == [] and "quiet the host" in line), line


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.parent.name + "/" + p.name)
def test_the_next_steps_of_every_kept_report_parse_with_the_bench_command(path):
    doc = json.loads(path.read_text())
    comparison = doc["summary"]["comparison"]
    texts = [m["next_step"] for m in (comparison or {}).get("metrics", {}).values() if m["next_step"]]
    texts += [line for line in report.render_markdown(doc).splitlines() if "Next step" in line]
    for text in texts:
        parses(advice.BENCH, text)
