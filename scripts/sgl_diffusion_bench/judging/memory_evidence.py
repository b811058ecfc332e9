"""What a run's memory figures are, decided once from the run's own log and never from a default.

The engine's perf dump records peak memory through the device's memory API. On a GPU those are device memory
figures; on a CPU run of an engine that lacks the torch.cpu memory API, the CPU adapter's b5 patch stands in and the
figures are the process's RSS. The campaign runner, judge_run, reports and baseline checks all ask this module, so
one log gives one answer everywhere:

- the adapter stood in (a ``b5 applied`` line, or the 0.5.10-era ``active: ...b5... memory figures are process RSS``
  line with b5 not disabled): ``process_rss``;
- an accelerator is present (the adapter's ``inactive: accelerator_present`` line, or the engine's
  ``Initializing distributed environment with world_size=N, device=cuda:0`` line naming a non-CPU device):
  ``device``;
- anything else (a CPU engine with no stand-in, or a log that says nothing): ``None``, and peak figures are withheld.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable

from ..engine import adapter_record
from ..engine.inside.cpu_adapter import sgl_cpu_adapter

DEVICE = "device"
PROCESS_RSS = "process_rss"
MEMORY_PATCH = "b5"
_ENGINE_DEVICE = re.compile(r"Initializing distributed environment with world_size=\d+, device=(?P<device>[\w:]+)")
# The adapter's line before it reported each patch on its own line (kept runs of 0.5.10.post1 carry it).
_LEGACY_ACTIVE = re.compile(r"\[sgl-cpu-adapter\] active: (?P<active>[\w,]+) \(pid \d+\) disabled: "
                            r"(?P<disabled>[\w,]+); memory figures are process RSS")


@dataclasses.dataclass
class MemoryEvidence:
    """The lines of one run (or one warm engine) that say what its memory figures are; fed line by line."""

    stand_in_line: str | None = None
    accelerator_line: str | None = None
    cpu_engine_line: str | None = None

    def feed(self, line: str) -> None:
        if self.stand_in_line is None and _stands_in(line):
            self.stand_in_line = line.strip()
        if self.accelerator_line is None and _names_accelerator(line):
            self.accelerator_line = line.strip()
        match = _ENGINE_DEVICE.search(line)
        if self.cpu_engine_line is None and match and match["device"] == "cpu":
            self.cpu_engine_line = line.strip()

    @property
    def kind(self) -> str | None:
        if self.stand_in_line:
            return PROCESS_RSS
        return DEVICE if self.accelerator_line else None

    @property
    def basis(self) -> str:
        """The line that decided, or why nothing did (for reports and judge_run's intent)."""
        if self.stand_in_line or self.accelerator_line:
            return self.stand_in_line or self.accelerator_line
        if self.cpu_engine_line:
            return ("the engine ran on the CPU and the adapter's memory stand-in (b5) did not run: peak memory "
                    "figures are not device memory and are withheld")
        return "the log names neither an accelerator nor the adapter's memory stand-in: peak memory is withheld"

    def to_json(self) -> dict[str, str | None]:
        return {"kind": self.kind, "basis": self.basis}


def evidence_of(lines: Iterable[str]) -> MemoryEvidence:
    evidence = MemoryEvidence()
    for line in lines:
        evidence.feed(line)
    return evidence


def _stands_in(line: str) -> bool:
    if sgl_cpu_adapter.TAG not in line:
        return False
    parsed = adapter_record.parse_line(line)
    if parsed is not None:
        return parsed["kind"] == "patch" and parsed["patch"] == MEMORY_PATCH and parsed["outcome"] == "applied"
    legacy = _LEGACY_ACTIVE.search(line)
    return bool(legacy) and MEMORY_PATCH in legacy["active"].split(",") \
        and MEMORY_PATCH not in legacy["disabled"].split(",")


def _names_accelerator(line: str) -> bool:
    if sgl_cpu_adapter.TAG in line:
        parsed = adapter_record.parse_line(line)
        return parsed is not None and parsed["kind"] == "process" and not parsed["active"]
    match = _ENGINE_DEVICE.search(line)
    return bool(match) and match["device"] != "cpu"
