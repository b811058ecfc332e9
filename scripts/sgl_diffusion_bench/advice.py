"""What to do when a comparison has no verdict: as data (stats and sequential build it from the gate that failed) and
as words for the command the user ran. Each surface renders the same advice for its own command, so a next step
never names a flag that command does not have (tests/test_advice.py parses every one with that command's parser).

Advice, a JSON object (bench-report.v1 ``$defs/advice``): ``action`` "more_rounds" (the spread allows a verdict
within the rounds a campaign may run) or "quiet_host" (the CV gate failed, or no reachable round count would do:
more samples do not cure that); ``rule`` "fixed" or "until_verdict"; ``rounds`` (more_rounds only); ``why``.
"""

from __future__ import annotations

from typing import Any, Mapping

BENCH, EVIDENCE, COMPARE = "bench_diffusion_denoise", "collect_pr_evidence", "compare_perf"
COMMANDS = (BENCH, EVIDENCE, COMPARE)
MAX_ROUNDS = 50  # 200 cells per arm pair: more is a typo, not a campaign; no advice asks for more
REQUESTS_PER_ROUND = 4  # an A/B/B/A round: what collect_pr_evidence's --budget-requests counts, per sample


def more_rounds(rule: str, rounds: int, why: str) -> dict[str, Any]:
    return {"action": "more_rounds", "rule": rule, "rounds": rounds, "why": why}


def quiet_host(rule: str, why: str) -> dict[str, Any]:
    return {"action": "quiet_host", "rule": rule, "rounds": None, "why": why}


def render(advice: Mapping[str, Any] | None, command: str, *, samples: int = 1) -> str | None:
    """The advice in words for ``command``, naming only its own flags; None without advice."""
    if advice is None:
        return None
    if advice["action"] == "quiet_host":
        return advice["why"]
    rounds = advice["rounds"]
    if command == BENCH:
        flags = (f"--until-verdict --budget-rounds {rounds}" if advice["rule"] == "until_verdict"
                 else f"--rounds {rounds}")
        return f"re-run with {flags}: {advice['why']}"
    if command == EVIDENCE:
        return (f"run again into a new --out folder with --budget-requests {rounds * REQUESTS_PER_ROUND * samples} "
                f"({rounds} A/B/B/A rounds at --samples {samples}): {advice['why']}")
    if command == COMPARE:
        return (f"measure {rounds} A/B/B/A rounds per group and compare their dumps, named <stem>_rNNpMM so the "
                f"rounds are read: {advice['why']}")
    raise ValueError(f"no advice wording for {command!r}")
