"""Which files a preset's task produces: an image preset's output is an image, a video preset's a video (a GIF is a
video container, never an image preset's output), a t2va preset's a video with sound, a 3D preset's a mesh.
Files of another kind next to the output are listed for debugging but never taken as the output."""

from __future__ import annotations

import re
from pathlib import Path

SUFFIXES = {
    "image": (".png", ".jpg", ".jpeg", ".webp"),
    "video": (".mp4", ".webm", ".mkv", ".mov", ".gif"),
    "audio": (".wav", ".mp3", ".flac"),
    "mesh": (".glb", ".obj"),
}
TASK_KINDS = {
    "t2i": ("image",), "edit": ("image",), "layered": ("image",),
    "t2v": ("video",), "i2v": ("video",), "ti2v": ("video",), "world": ("video",),
    "t2va": ("video", "audio"),
    "3d": ("mesh",),
}
ALL_SUFFIXES = tuple(s for kind in SUFFIXES.values() for s in kind)


def output_suffixes(task: str | None) -> tuple[str, ...]:
    """The suffixes a task's output may have; an unknown task (None) takes any media."""
    if task is None:
        return ALL_SUFFIXES
    return tuple(s for kind in TASK_KINDS[task] for s in SUFFIXES[kind])


def _stem_pattern(stem: str, suffixes: tuple[str, ...]) -> re.Pattern[str]:
    ext = "(?:" + "|".join(map(re.escape, suffixes)) + ")"
    return re.compile(re.escape(stem) + r"(?:_\d+)?" + ext + "$", re.IGNORECASE)


def split_outputs(run_dir: Path, stem: str, task: str | None) -> tuple[list[Path], list[Path]]:
    """(this run's outputs of the task's kinds, media of other kinds named like an output). Only ``<stem>[_N].<ext>``
    inside the run's own directory, never a prefix glob: another label's files never match."""
    if not run_dir.is_dir():
        return [], []
    taken = _stem_pattern(stem, output_suffixes(task))
    named = _stem_pattern(stem, ALL_SUFFIXES)
    files = sorted(p for p in run_dir.iterdir() if p.is_file())
    outputs = [p for p in files if taken.fullmatch(p.name)]
    others = [p for p in files if named.fullmatch(p.name) and p not in outputs]
    return outputs, others
