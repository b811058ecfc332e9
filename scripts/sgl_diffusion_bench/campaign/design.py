"""Campaign plans: which arms run, in which order, before anything runs. Pure: no engine, no files.

Modes:
- ``single``: one measured run of one configuration.
- ``abba``: eager (A) against breakable CUDA graphs (B), rounds of A1 B1 B2 A2 (the seed PR's order: drift over
  time hits both arms alike).
- ``aa``: the same configuration in both arms, in the same A/B/B/A order: the noise floor of this machine.
- ``ab``: a generic A/B where each arm is a set of extra engine flags, A/B/B/A order; an arm's flag for a request
  field (``--num-inference-steps``, ``--width``, ...) replaces the preset's value for that arm, and an arm's
  ``FLAG=VALUE`` override (``--arm-b-override-flag``) replaces the value of an engine flag the preset sets.
- ``matrix``: for each quality the engine offers, eager against BCG in A/B/B/A rounds (``--rounds 1`` gives the
  reference's 12 rows on a three-quality engine); the summary compares the first quality's pair, every cell keeps
  its arm so the report shows all of them.

With a request manifest (``--requests-file``) every slot sends each of the manifest's requests, in file order, so both
arms serve the same requests in the same order and each request's change is judged on its own (request_verdicts.py).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from .. import advice, argv_tokens, contract
from ..engine.request_manifest import Manifest

MODES = ("single", "abba", "aa", "ab", "matrix")
ABBA_POSITIONS = (("A", "A1"), ("B", "B1"), ("B", "B2"), ("A", "A2"))
DEFAULT_ROUNDS = 2
MAX_CELLS = 10_000  # a plan is built, checked and printed whole; more is days of engine time or a load test


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str  # also part of each run's file names: letters, digits, '.', '-'
    letter: str | None
    description: str
    extra_args: tuple[str, ...] = ()
    quality: str | None = None
    bcg: bool = False
    flag_overrides: tuple[tuple[str, str], ...] = ()  # (flag, value): the preset's flag takes this value in this arm

    def to_json(self) -> dict[str, Any]:
        doc = {"letter": self.letter, "description": self.description, "extra_args": list(self.extra_args),
               "quality": self.quality, "bcg": self.bcg}
        if self.flag_overrides:
            doc["flag_overrides"] = [f"{flag}={value}" for flag, value in self.flag_overrides]
        return doc

    @property
    def options(self) -> tuple[str, str]:
        """The command-line options this arm's flags and overrides came from, for messages that name them."""
        letter = (self.letter or "b").lower()
        return f"--arm-{letter}-args", f"--arm-{letter}-override-flag"


def parse_flag_overrides(items: Sequence[str], option: str) -> tuple[tuple[str, str], ...]:
    """``FLAG=VALUE`` items (the flag with or without its leading ``--``: argparse reads a value that starts with
    ``--`` as an option) as (``--flag``, value) pairs; a UsageError naming ``option`` for anything else."""
    pairs: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        flag = "--" + name.removeprefix("--")
        if not (eq and value and re.fullmatch(r"--[A-Za-z0-9][A-Za-z0-9_.-]*", flag)):
            raise contract.UsageError("usage.bad_flag_override", f"{option} {item!r} is not FLAG=VALUE",
                                      f"e.g. {option} dit-cpu-offload=true")
        if flag in pairs:
            raise contract.UsageError("usage.bad_flag_override", f"{option} names {flag} twice",
                                      "give each flag once")
        pairs[flag] = value
    return tuple(pairs.items())


def arm_request_fields(arm_args: Sequence[str], fields: Sequence[str]) -> tuple[list[str], list[str]]:
    """An ab arm's flags split into request fields (``--num-inference-steps 4`` or ``=4`` -> ``num_inference_steps=4``
    for a field in ``fields``), which replace the preset's value for that arm as ``--override`` does for every arm,
    and the other flags, passed on as given."""
    flag_field = {f"--{f.replace('_', '-')}": f for f in fields}
    overrides: list[str] = []
    rest: list[str] = []
    for flag, values, tokens in argv_tokens.split_flags(arm_args):
        if flag in flag_field and values:
            overrides.append(f"{flag_field[flag]}={values[0]}")
            rest.extend(values[1:])  # tokens past the field's one value stay as given
        else:
            rest.extend(tokens)
    return overrides, rest


@dataclasses.dataclass(frozen=True)
class Slot:
    """One cell of the plan: which arm, which round, which position in the round (A1, B1, B2, A2)."""

    index: int
    arm: str
    round: int | None
    position: str | None
    sample: int | None = None  # 1..N when the campaign takes N samples per slot, else None
    request: int | None = None  # 0-based index of the manifest request this cell sends (None: the preset's request)

    @property
    def position_number(self) -> int | None:
        """1-based place in the round (A1 B1 B2 A2 -> 1 2 3 4), for file names."""
        return [p for _, p in ABBA_POSITIONS].index(self.position) + 1 if self.position else None


@dataclasses.dataclass(frozen=True)
class Campaign:
    mode: str
    arms: dict[str, Arm]
    slots: tuple[Slot, ...]
    rounds: int
    baseline_arm: str | None
    candidate_arm: str | None
    samples: int = 1
    manifest: Manifest | None = None

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "rounds": self.rounds, "baseline_arm": self.baseline_arm,
                "candidate_arm": self.candidate_arm, "arms": {n: a.to_json() for n, a in self.arms.items()},
                "order": [{"round": s.round, "position": s.position, "arm": s.arm} for s in self.slots
                          if s.round is not None and s.sample in (None, 1) and s.request in (None, 0)]}


def _arm_words(args: Sequence[str], overrides: Sequence[tuple[str, str]]) -> str:
    return " ".join([*args, *(f"{flag}={value} (replacing the preset's)" for flag, value in overrides)])


def _block(arm: str, round_: int | None, position: str | None, start_index: int, samples: int,
           requests: int) -> list[Slot]:
    """One position's cells: each manifest request in file order (or the preset's one request), each ``samples``
    times in a row."""
    return [Slot(start_index + n, arm, round_, position, s if samples > 1 else None, q if requests else None)
            for n, (q, s) in enumerate((q, s) for q in range(max(requests, 1)) for s in range(1, samples + 1))]


def _abba(a: Arm, b: Arm, rounds: int, start_index: int = 0, first_round: int = 1, samples: int = 1,
          requests: int = 0) -> list[Slot]:
    """A1 B1 B2 A2 per round; with ``samples`` > 1 each position takes that many measured requests in a row, with a
    manifest of ``requests`` requests each of them."""
    slots: list[Slot] = []
    for r in range(first_round, first_round + rounds):
        for letter, position in ABBA_POSITIONS:
            slots += _block((a if letter == "A" else b).name, r, position, start_index + len(slots), samples, requests)
    return slots


def _check_size(mode: str, positions: int, rounds: int, samples: int, requests: int) -> None:
    """Refuse a plan past MAX_CELLS before one slot of it is built (a 10^5-line manifest times four positions)."""
    cells = positions * rounds * samples * max(requests, 1)
    if cells <= MAX_CELLS:
        return
    parts = [f"{positions} positions", f"{rounds} rounds", f"{samples} samples", f"{requests} manifest requests"]
    fits = max(MAX_CELLS // (positions * rounds * samples), 1)
    raise contract.UsageError(
        "usage.too_many_cells", f"the {mode} campaign plans {cells} cells ({' x '.join(parts[:3 + bool(requests)])}); "
        f"a campaign runs at most {MAX_CELLS}",
        "use fewer --rounds or --samples" + (f", or split the manifest into files of at most {fits} lines, a campaign "
                                             "each (bench_diffusion_serving.py sends a long manifest as load)"
                                             if requests else ""))


def plan(mode: str, *, rounds: int = DEFAULT_ROUNDS, quality: str | None = None, bcg: bool = False,
         arm_a_args: Sequence[str] = (), arm_b_args: Sequence[str] = (),
         arm_a_overrides: Sequence[str] = (), arm_b_overrides: Sequence[str] = (),
         engine_qualities: Sequence[str] | None = None, samples: int = 1,
         manifest: Manifest | None = None) -> Campaign:
    """The campaign for ``mode``; a UsageError when the mode's inputs do not fit it."""
    n = len(manifest.requests) if manifest else 0
    if samples < 1:
        raise contract.UsageError("usage.bad_samples", f"--samples must be at least 1, got {samples}",
                                  "use --samples 1 (one measured request per slot) or more")
    if mode not in MODES:
        raise contract.UsageError("usage.bad_campaign", f"unknown campaign {mode!r}", f"use one of {', '.join(MODES)}")
    if not 1 <= rounds <= advice.MAX_ROUNDS:
        raise contract.UsageError("usage.bad_rounds", f"--rounds must be 1..{advice.MAX_ROUNDS}, got {rounds}",
                                  "use --rounds 2")
    if mode != "ab" and (arm_a_args or arm_b_args or arm_a_overrides or arm_b_overrides):
        raise contract.UsageError("usage.arm_args_need_ab", "--arm-a-args/--arm-b-args and "
                                  "--arm-a-override-flag/--arm-b-override-flag only apply to --campaign ab",
                                  "add --campaign ab")
    pairs = len(engine_qualities or ()) if mode == "matrix" else 1
    _check_size(mode, 1 if mode == "single" else pairs * len(ABBA_POSITIONS), 1 if mode == "single" else rounds,
                samples, n)
    if mode == "single":
        arm = Arm("run", None, "one run" + (" with BCG" if bcg else ""), quality=quality, bcg=bcg)
        return Campaign(mode, {arm.name: arm}, tuple(_block(arm.name, None, None, 0, samples, n)), 1, None, None,
                        samples, manifest)
    if mode == "abba":
        a = Arm("eager", "A", "eager (baseline)", quality=quality)
        b = Arm("bcg", "B", "breakable CUDA graphs (candidate)", quality=quality, bcg=True)
        return Campaign(mode, {"eager": a, "bcg": b}, tuple(_abba(a, b, rounds, samples=samples, requests=n)), rounds,
                        "eager", "bcg", samples, manifest)
    if mode == "aa":
        a = Arm("a", "A", "configuration under test", quality=quality, bcg=bcg)
        b = Arm("a-again", "B", "the same configuration again (A/A noise measurement)", quality=quality, bcg=bcg)
        return Campaign(mode, {"a": a, "a-again": b}, tuple(_abba(a, b, rounds, samples=samples, requests=n)), rounds,
                        "a", "a-again", samples, manifest)
    if mode == "ab":
        if not (arm_b_args or arm_a_args or arm_a_overrides or arm_b_overrides):
            raise contract.UsageError("usage.ab_needs_arms", "--campaign ab needs --arm-b-args or "
                                      "--arm-b-override-flag (and optionally the same for arm A)",
                                      "e.g. --arm-b-args='--attention-backend fa'")
        a_over = parse_flag_overrides(arm_a_overrides, "--arm-a-override-flag")
        b_over = parse_flag_overrides(arm_b_overrides, "--arm-b-override-flag")
        a = Arm("a", "A", "baseline: " + (_arm_words(arm_a_args, a_over) or "preset as is"), tuple(arm_a_args),
                quality, bcg, a_over)
        b = Arm("b", "B", "candidate: " + _arm_words(arm_b_args, b_over), tuple(arm_b_args), quality, bcg, b_over)
        return Campaign(mode, {"a": a, "b": b}, tuple(_abba(a, b, rounds, samples=samples, requests=n)), rounds, "a",
                        "b", samples, manifest)
    # matrix: every quality the engine offers; the engine decides, not a hard-coded list
    if not engine_qualities:
        raise contract.PreconditionError("engine.no_quality_levels", "the installed engine has no --quality "
                                         "levels, so there is no quality x BCG matrix to run",
                                         "use a newer sglang (0.5.23 or main), or --campaign abba on one quality")
    arms: dict[str, Arm] = {}
    slots: list[Slot] = []
    for q in engine_qualities:
        a = Arm(f"eager-{q}", "A", f"eager, quality={q}", quality=q)
        b = Arm(f"bcg-{q}", "B", f"BCG, quality={q}", quality=q, bcg=True)
        arms.update({a.name: a, b.name: b})
        slots += _abba(a, b, rounds, start_index=len(slots), samples=samples, requests=n)
    first = engine_qualities[0]
    return Campaign(mode, arms, tuple(slots), rounds, f"eager-{first}", f"bcg-{first}", samples, manifest)
