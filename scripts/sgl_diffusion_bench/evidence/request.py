"""The request an evidence folder answers: the change described once, normalised, hashed. Two runs on one folder
must be the same request; the fields that differ are named when they are not."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import advice, contract, fileio, presets
from ..campaign import sequential

LAYOUT_FLAGS = ("--num-gpus", "--tp-size", "--sp-degree", "--ulysses-degree", "--ring-degree")
MIN_BUDGET_ROUNDS = 2  # the sequential rule's first look needs two rounds


@dataclasses.dataclass(frozen=True)
class EvidenceRequest:
    """Everything that shapes the evidence: same request, same folder."""

    model: str
    model_path: str | None
    overrides: Mapping[str, str]
    experiment: str  # "bcg": eager against BCG (the seed PR's); "args": --baseline-args against --candidate-args
    baseline_args: tuple[str, ...]
    candidate_args: tuple[str, ...]
    threshold_pct: float
    samples: int
    budget_requests: int
    model_cache_root: str | None
    budget_minutes: float | None = None
    profile_timesteps: int = 2
    common_args: tuple[str, ...] = ()  # engine flags both arms share (--extra-args)
    engine_overlap: str = "auto"  # the campaign's engines load side by side when they fit (engine_overlap.py)

    @property
    def budget_rounds(self) -> int:
        """A/B/B/A rounds the request budget pays for (4 slots x samples each)."""
        return self.budget_requests // (4 * self.samples)

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["overrides"] = dict(sorted(self.overrides.items()))
        doc["baseline_args"], doc["candidate_args"] = list(self.baseline_args), list(self.candidate_args)
        if doc.pop("common_args"):  # absent when unused: folders made before --extra-args keep their request hash
            doc["common_args"] = list(self.common_args)
        if doc["engine_overlap"] == "auto":  # absent at its default: folders made before it keep their request hash
            del doc["engine_overlap"]
        return doc

    def arm_args(self, arm: str) -> tuple[str, ...]:
        """The extra engine flags one arm ("baseline" or "candidate") runs with: the shared ones, then its own."""
        return (*self.common_args, *(self.baseline_args if arm == "baseline" else self.candidate_args))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "EvidenceRequest":
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in doc.items() if k in fields}
        values["baseline_args"] = tuple(values["baseline_args"])
        values["candidate_args"] = tuple(values["candidate_args"])
        values["common_args"] = tuple(values.get("common_args", ()))
        return cls(**values)

    def sha256(self) -> str:
        return fileio.sha256_bytes(json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode())


def build(*, model: str, model_path: str | None, overrides: Sequence[str], bcg: bool, baseline_args: str,
          candidate_args: str, threshold_pct: float, samples: int, budget_requests: int | None,
          model_cache_root: str | None, budget_minutes: float | None = None,
          common_args: str = "", engine_overlap: str = "auto") -> EvidenceRequest:
    """The normalised request; a UsageError for a change that is not described, or arms of different layouts."""
    try:
        base, cand = tuple(shlex.split(baseline_args)), tuple(shlex.split(candidate_args))
        common = tuple(shlex.split(common_args))
    except ValueError as exc:
        raise contract.UsageError("usage.bad_extra_args", f"--baseline-args/--candidate-args/--extra-args do not "
                                  f"parse: {exc}",
                                  "quote each as one shell string") from exc
    if bcg and (base or cand):
        raise contract.UsageError("usage.rejected_combination", "--bcg is the eager-vs-BCG experiment: it takes no "
                                  "--baseline-args/--candidate-args", "drop one of them")
    if not bcg and base == cand:
        raise contract.UsageError("evidence.no_change", "the baseline and the candidate are the same configuration",
                                  "describe the change: --candidate-args '...' (and --baseline-args), or --bcg")
    budget = budget_requests if budget_requests is not None else sequential.DEFAULT_BUDGET_ROUNDS * 4 * samples
    rounds = budget // (4 * samples)
    if not MIN_BUDGET_ROUNDS <= rounds <= advice.MAX_ROUNDS:
        raise contract.UsageError("usage.bad_budget", f"--budget-requests {budget} pays for {rounds} A/B/B/A "
                                  f"round(s) of {4 * samples} requests; the rule needs {MIN_BUDGET_ROUNDS}.."
                                  f"{advice.MAX_ROUNDS}", f"use --budget-requests {MIN_BUDGET_ROUNDS * 4 * samples} "
                                  "or more")
    layouts = {"baseline": layout_of((*common, *base)), "candidate": layout_of((*common, *cand))}
    if layouts["baseline"] != layouts["candidate"]:
        raise contract.UsageError("evidence.layouts_differ", f"the arms run different parallel layouts "
                                  f"({layouts}): a change of layout is not the change under test",
                                  "give both arms the same --num-gpus/--tp-size/--sp-degree/--ulysses-degree")
    presets.get_preset(model)  # an unknown preset is a usage error now
    return EvidenceRequest(
        model=model, model_path=str(Path(model_path).expanduser().resolve()) if model_path else None,
        overrides=presets.parse_overrides(list(overrides)), experiment="bcg" if bcg else "args",
        baseline_args=base, candidate_args=cand, threshold_pct=threshold_pct, samples=samples,
        budget_requests=rounds * 4 * samples,
        model_cache_root=str(Path(model_cache_root).expanduser().resolve()) if model_cache_root else None,
        budget_minutes=budget_minutes, common_args=common, engine_overlap=engine_overlap)


def layout_of(args: Sequence[str]) -> dict[str, str]:
    """The parallel-layout flags an arm's extra arguments set (``--flag value`` or ``--flag=value``)."""
    found: dict[str, str] = {}
    for i, token in enumerate(args):
        name, sep, value = token.partition("=")
        if name in LAYOUT_FLAGS:
            found[name] = value if sep else (args[i + 1] if i + 1 < len(args) else "")
    return found


def parallel_layout(preset: presets.Preset, request: EvidenceRequest) -> dict[str, Any]:
    """The run's layout, part of its identity: GPUs and the degrees the preset and the arms set."""
    flags = {**layout_of(preset.extra_args), **layout_of(request.arm_args("baseline"))}

    def degree(flag: str) -> int | None:
        value = flags.get(flag)
        return int(value) if value and value.isdigit() else None

    return {"num_gpus": preset.num_gpus, "tp_size": degree("--tp-size"), "sp_degree": degree("--sp-degree"),
            "ulysses_degree": degree("--ulysses-degree"), "ring_degree": degree("--ring-degree"),
            "same_in_both_arms": True}


def differing_fields(recorded: Mapping[str, Any], asked: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(recorded) | set(asked) if recorded.get(k) != asked.get(k))
