"""The CPU adapter's record, read back from an engine's log: which processes ran it and what each patch did.

Tool side only (the engine's processes write the lines: sgl_cpu_adapter's ``_report`` and ``announce``).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from .inside.cpu_adapter.sgl_cpu_adapter import DISABLE_ENV, MEMORY_NOTE, PATCHES

_PROCESS_LINE = re.compile(r"\[sgl-cpu-adapter\] (?:active \(pid (?P<pid>\d+)\): checking (?P<checking>[\w,]+); "
                           r"absent: (?P<absent>[\w,]+); disabled: (?P<disabled>[\w,]+)"
                           r"|inactive: accelerator_present \(pid (?P<inactive_pid>\d+)\))")
_PATCH_LINE = re.compile(r"\[sgl-cpu-adapter\] (?P<patch>b\d+a?|fork|gc) (?P<outcome>applied|not-needed) "
                         r"\(pid (?P<pid>\d+)\): (?P<reason>.*)$")
_UNREACHED = {"b1": "the engine never asked torch.cpu for get_device_properties",
              "b4": "the engine never called init_process_group",
              "b5": "the engine never asked torch.cpu for the memory API torch lacks (it records no memory on CPU)",
              "b7": "the engine called no layer whose sgl-kernel CPU op is missing (as FLUX's, 0.5.10's Wan blocks)",
              "fork": "the engine started no scheduler worker",
              "gc": "no process imported the engine's entry module with the collector off"}


def _ids(text: str | None) -> list[str]:
    return [] if text in (None, "none") else text.split(",")


def parse_line(line: str) -> dict[str, Any] | None:
    """What one adapter line says ({"kind": "process"|"patch", ...}); None for other lines."""
    match = _PATCH_LINE.search(line)
    if match:
        return {"kind": "patch", "patch": match["patch"], "outcome": match["outcome"], "pid": int(match["pid"]),
                "reason": match["reason"].strip()}
    match = _PROCESS_LINE.search(line)
    if not match:
        return None
    if match["inactive_pid"]:
        return {"kind": "process", "active": False, "pid": int(match["inactive_pid"]), "checking": [], "absent": [],
                "disabled": []}
    return {"kind": "process", "active": True, "pid": int(match["pid"]), "checking": _ids(match["checking"]),
            "absent": _ids(match["absent"]), "disabled": _ids(match["disabled"])}


def summarize(lines: Iterable[str]) -> dict[str, Any] | None:
    """The adapter's record over every process of one run: applied and not-needed patches kept apart.

    A patch counts as applied when any process applied it; as not needed when no process did (with the reason a
    process gave, else "the engine never reached it"). None when no adapter line was seen."""
    processes, outcomes = [], {}
    for parsed in filter(None, map(parse_line, lines)):
        if parsed["kind"] == "process":
            processes.append(parsed)
        elif parsed["outcome"] == "applied" or parsed["patch"] not in outcomes:
            outcomes[parsed["patch"]] = parsed
    if not processes and not outcomes:
        return None
    active = any(p["active"] for p in processes)
    disabled = sorted({d for p in processes for d in p["disabled"]}, key=PATCHES.index)
    absent = {a for p in processes for a in p["absent"]}
    # Patches this run's adapter had (a log written before a patch existed says nothing of it).
    known = {i for p in processes for i in (*p["checking"], *p["absent"], *p["disabled"])} or set(PATCHES)
    applied = [p for p in PATCHES if outcomes.get(p, {}).get("outcome") == "applied"]
    not_needed = []
    for patch in PATCHES:
        if patch in applied or patch in disabled or not active or patch not in known:
            continue
        if patch in outcomes:
            reason = outcomes[patch]["reason"]
        elif patch in absent:
            reason = "the module it hooks is absent from this engine"
        else:
            reason = _UNREACHED.get(patch, "the engine never reached the code it hooks")
        not_needed.append({"id": patch, "reason": reason})
    return {"active": active, "applied": applied, "not_needed": not_needed, "disabled": disabled,
            "reasons": {p: outcomes[p]["reason"] for p in applied}, "pids": sorted({p["pid"] for p in processes}),
            "disable_env": DISABLE_ENV, "memory_source": "process_rss" if "b5" in applied else None,
            "memory_note": MEMORY_NOTE if "b5" in applied else None}
