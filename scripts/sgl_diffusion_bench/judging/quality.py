"""Output comparison: byte identity for lossless arms, SSIM/PSNR against the reference for lossy ones.

A level that promises the same bytes (what each release promises is data/log_markers.yaml's quality_models: 0.5.23's
"exact" and "lossless" with its alias "extra-high", older mains' "lossless") means the same bytes: every used cell of
the arms at that level must hash like the comparator, the first such cell in run order. Lossy levels are scored against
the reference output (the baseline arm's first used cell) with scikit-image SSIM and PSNR; videos frame by frame
(decoded with PyAV, which the engine stack installs), every frame gated.
PSNR of identical inputs is infinite: JSON carries ``psnr_db: null`` with ``psnr_infinite: true``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from .. import contract
from . import log_markers
from .cell import Cell

if TYPE_CHECKING:  # numpy is imported where frames are read, so a run that scores nothing never loads it
    import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
VIDEO_SUFFIXES = (".mp4", ".webm", ".mkv", ".mov", ".avi", ".gif")


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Minimum SSIM and PSNR (dB) a lossy output must reach against the reference."""

    ssim_min: float
    psnr_min_db: float

    def to_json(self) -> dict[str, float]:
        return {"ssim_min": self.ssim_min, "psnr_min_db": self.psnr_min_db}


DEFAULT_THRESHOLDS = {"image": Thresholds(0.95, 28.0), "video": Thresholds(0.92, 24.0)}


class QualityError(contract.InputError):
    def __init__(self, message: str, hint: str = "check that both outputs exist and have the same size/frames"):
        super().__init__("input.output_not_comparable", message, hint)


def media_kind(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return "image"
    if suffix in VIDEO_SUFFIXES:
        return "video"
    raise QualityError(f"{path}: cannot score a '{suffix}' output with SSIM/PSNR",
                       "only images and videos are scored; compare other outputs by hash")


def read_image(path: str | Path) -> np.ndarray:
    import numpy as np
    from PIL import Image

    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"))
    except (OSError, ValueError) as exc:
        raise QualityError(f"{path}: not a readable image ({exc})") from None


def iter_video_frames(path: str | Path) -> Iterator[np.ndarray]:
    """RGB frames. GIFs through Pillow; everything else through PyAV (imageio 2.36's pyav plugin breaks on av 16)."""
    if Path(path).suffix.lower() == ".gif":
        import numpy as np
        from PIL import Image, ImageSequence

        try:
            with Image.open(path) as img:
                for frame in ImageSequence.Iterator(img):
                    yield np.asarray(frame.convert("RGB"))
        except OSError as exc:
            raise QualityError(f"{path}: not a readable GIF ({exc})") from None
        return
    import av

    try:
        with av.open(str(path)) as container:
            for frame in container.decode(video=0):
                yield frame.to_ndarray(format="rgb24")
    except (av.FFmpegError, OSError, IndexError) as exc:
        raise QualityError(f"{path}: not a decodable video ({exc})") from None


def frame_scores(reference: np.ndarray, test: np.ndarray) -> tuple[float, float]:
    """(SSIM, MSE) of two uint8 RGB frames of the same shape."""
    import numpy as np
    from skimage.metrics import structural_similarity

    if reference.shape != test.shape:
        raise QualityError(f"frame shapes differ: {reference.shape} vs {test.shape}")
    if min(reference.shape[:2]) < 7:
        raise QualityError(f"frame {reference.shape[:2]} is smaller than SSIM's 7x7 window")
    ssim = float(structural_similarity(reference, test, channel_axis=-1, data_range=255))
    mse = float(np.mean((reference.astype(np.float64) - test.astype(np.float64)) ** 2))
    return ssim, mse


def psnr_from_mse(mse: float) -> float:
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def _psnr_json(psnr: float) -> dict[str, Any]:
    return {"psnr_db": None if psnr == float("inf") else psnr, "psnr_infinite": psnr == float("inf")}


def compare_media(reference: str | Path, test: str | Path, thresholds: Mapping[str, Thresholds] | None = None
                  ) -> dict[str, Any]:
    """SSIM (mean over frames) and PSNR (from the MSE pooled over frames), the worst frame by SSIM, pass/fail.
    Every frame is gated, not only the mean: one broken frame of a video fails the output."""
    kind = media_kind(reference)
    if media_kind(test) != kind:
        raise QualityError(f"{reference} is an {kind} but {test} is not")
    if kind == "image":
        pairs: Iterator[tuple[np.ndarray, np.ndarray]] = iter([(read_image(reference), read_image(test))])
    else:
        pairs = _zip_frames(reference, test)
    ssims, mses = [], []
    for ref_frame, test_frame in pairs:
        ssim, mse = frame_scores(ref_frame, test_frame)
        ssims.append(ssim)
        mses.append(mse)
    if not ssims:
        raise QualityError(f"{reference}: no frames decoded")
    worst = ssims.index(min(ssims))
    limits = (thresholds or DEFAULT_THRESHOLDS)[kind]
    psnr = psnr_from_mse(statistics.fmean(mses))
    ssim = statistics.fmean(ssims)
    return {"path": str(test), "media": kind, "frames": len(ssims), "ssim": ssim, **_psnr_json(psnr),
            "worst_frame": {"index": worst, "ssim": ssims[worst], **_psnr_json(psnr_from_mse(mses[worst]))},
            "passed": (ssim >= limits.ssim_min and psnr >= limits.psnr_min_db and ssims[worst] >= limits.ssim_min
                       and min(psnr_from_mse(m) for m in mses) >= limits.psnr_min_db)}


def _zip_frames(reference: str | Path, test: str | Path) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    ref_frames, test_frames = iter_video_frames(reference), iter_video_frames(test)
    count = 0
    while True:
        a, b = next(ref_frames, None), next(test_frames, None)
        if a is None and b is None:
            return
        if a is None or b is None:
            raise QualityError(f"frame counts differ: {reference} and {test} diverge after {count} frames")
        count += 1
        yield a, b


# What a level promises (data/log_markers.yaml's quality_models, recognised by the levels the engine accepts):
# "bit_exact" and "same_math" levels must give the same bytes in eager and BCG arms; "lossy" ones are scored.
BIT_EXACT, SAME_MATH, LOSSY = "bit_exact", "same_math", "lossy"
IDENTITY_SEMANTICS = (BIT_EXACT, SAME_MATH)
IDENTITY_REASON = "output.differs"
QUALITY_REASON = "output.below_quality"


def _quality_model(engine_levels: Sequence[str] | None) -> log_markers.QualityModel:
    return log_markers.load_catalog().quality_model(engine_levels)


def canonical_level(level: str | None, engine_levels: Sequence[str] | None = None) -> str:
    """The level a request really runs at: an alias resolved; None as "lossless", the level the command builder
    pins when the engine has --quality (and what an engine without it runs: eager, the same bytes)."""
    model = _quality_model(engine_levels)
    level = level or "lossless"
    return model.aliases.get(level, level)


def level_semantics(level: str | None, engine_levels: Sequence[str] | None = None) -> str:
    """bit_exact, same_math or lossy; an unknown level is lossy (scored, never assumed identical)."""
    return _quality_model(engine_levels).semantics.get(canonical_level(level, engine_levels), LOSSY)


def _hashes(cell: Cell) -> tuple[str, ...]:
    return tuple(o["sha256"] for o in cell.outputs)


def _judged(cell: Cell) -> bool:
    """A valid cell, or one this module already made invalid for its bytes (it stays in the identity check)."""
    return cell.valid or any(r.startswith(IDENTITY_REASON) for r in cell.reasons)


def byte_identity(cells: Sequence[Cell], arms: Sequence[str], level: str | None = None
                  ) -> dict[str, Any]:
    """Group the used cells of ``arms`` by their output hashes; passes only with one group. The comparator is the
    first such cell in run order (the baseline arm's first cell in an A/B/B/A campaign); every cell whose bytes
    differ from it is a mismatch naming both hashes."""
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    without, mismatches = [], []
    comparator: dict[str, Any] | None = None
    for cell in sorted(cells, key=lambda c: c.index):
        if cell.arm not in arms or not _judged(cell):
            continue
        hashes = _hashes(cell)
        if not hashes:
            without.append(cell.index)
            continue
        group = groups.setdefault(hashes, {"sha256s": list(hashes), "cells": [], "arms": []})
        group["cells"].append(cell.index)
        if cell.arm not in group["arms"]:
            group["arms"].append(cell.arm)
        if comparator is None:
            comparator = {"cell": cell.index, "arm": cell.arm, "sha256s": list(hashes)}
        elif list(hashes) != comparator["sha256s"]:
            mismatches.append({"cell": cell.index, "arm": cell.arm, "sha256s": list(hashes)})
    identical = len(groups) == 1 and not without
    return {"kind": "byte_identity", "level": level, "arms": list(arms), "identical": identical,
            "comparator": comparator, "mismatches": mismatches, "groups": list(groups.values()),
            "cells_without_outputs": without, "passed": identical}


def identity_reason(check: Mapping[str, Any], mismatch: Mapping[str, Any]) -> str:
    comp = check["comparator"]
    level = f" at quality {check['level']}" if check.get("level") else ""
    return (f"{IDENTITY_REASON}: output sha256 {', '.join(mismatch['sha256s'])} differs from comparator cell "
            f"{comp['cell']} ({comp['arm']}) sha256 {', '.join(comp['sha256s'])}{level}: the same-bytes contract "
            f"is broken, so this cell's time is not evidence of a speedup")


def unstable_comparator_reason(check: Mapping[str, Any]) -> str | None:
    """When the comparator's own arm writes different bytes across its cells (eager against itself, upstream's
    "eager <q> output hashes are unstable"), no cell of that level has a reference to be compared with."""
    comp = check["comparator"]
    own = [m for m in check["mismatches"] if comp is not None and m["arm"] == comp["arm"]]
    if not own:
        return None
    level = f" at quality {check['level']}" if check.get("level") else ""
    cells = ", ".join(str(m["cell"]) for m in own)
    return (f"{IDENTITY_REASON}: arm {comp['arm']} is unstable{level}: cell(s) {cells} wrote other bytes than its "
            f"cell {comp['cell']} (sha256 {', '.join(comp['sha256s'])}), so no cell of this level has a stable "
            "reference and none counts")


def invalidations(output_quality_doc: Mapping[str, Any] | None) -> dict[int, str]:
    """Cell index -> the reason it cannot count: bytes differing from the comparator at an identity level (every
    cell of the level when the comparator's own arm is unstable), or a lossy output (any frame) below the
    thresholds."""
    found: dict[int, str] = {}
    for check in (output_quality_doc or {}).get("checks", []):
        if check["kind"] == "byte_identity":
            unstable = unstable_comparator_reason(check)
            if unstable is not None:
                for group in check["groups"]:
                    for index in group["cells"]:
                        found.setdefault(index, unstable)
            for mismatch in check["mismatches"]:
                found.setdefault(mismatch["cell"], identity_reason(check, mismatch))
        else:
            for r in check["results"]:
                if not r["passed"] and r["cell"] is not None:
                    w = r["worst_frame"]
                    found.setdefault(r["cell"], f"{QUALITY_REASON}: SSIM {r['ssim']:.4f}, worst frame {w['index']} "
                                     f"SSIM {w['ssim']:.4f} against thresholds SSIM >= "
                                     f"{check['thresholds']['ssim_min']} and PSNR >= "
                                     f"{check['thresholds']['psnr_min_db']} dB (quality {check['quality']})")
    return found


def outputs_differ(output_quality_doc: Mapping[str, Any] | None) -> bool:
    """True when an identity level's outputs are not the same bytes: no timing of that campaign is a speedup."""
    return any(c["kind"] == "byte_identity" and (c.get("mismatches") or not c["passed"])
               for c in (output_quality_doc or {}).get("checks", []))


def similarity(cells: Sequence[Cell], arm: str, quality: str | None, reference: Cell,
               thresholds: Mapping[str, Thresholds] | None = None) -> dict[str, Any]:
    """Score every used cell of ``arm`` against ``reference`` (a cell); an unreadable output fails the check."""
    ref_path = reference.outputs[0]["path"] if reference.outputs else None
    limits = thresholds or DEFAULT_THRESHOLDS
    results, errors = [], []
    for cell in cells:
        if cell.arm != arm or not (cell.valid or any(r.startswith(QUALITY_REASON) for r in cell.reasons)):
            continue
        if ref_path is None or not cell.outputs:
            errors.append(f"cell {cell['index']}: no output to compare")
            continue
        try:
            scored = compare_media(ref_path, cell.outputs[0]["path"], limits)
        except QualityError as exc:
            errors.append(f"cell {cell['index']}: {exc.message}")
            continue
        results.append({"cell": cell.index, "arm": arm, **scored})
    kind = results[0]["media"] if results else "image"
    return {"kind": "similarity", "arm": arm, "quality": quality,
            "reference": {"cell": reference.index, "arm": reference.arm, "path": ref_path or ""},
            "thresholds": limits[kind].to_json(), "results": results, "errors": errors,
            "passed": bool(results) and not errors and all(r["passed"] for r in results)}


def output_quality(cells: Sequence[Cell], arms: Mapping[str, Mapping[str, Any]], baseline: str,
                   thresholds: Mapping[str, Thresholds] | None = None,
                   engine_levels: Sequence[str] | None = None) -> dict[str, Any] | None:
    """bench-report.v1 ``summary.output_quality``: byte identity within each identity level (arms grouped by the
    level they really run at, aliases resolved; ``engine_levels`` tells which release's promises apply), SSIM/PSNR
    of each lossy arm against the baseline's first used cell. None when no cell has outputs. The cells of a manifest
    campaign are checked per request (each check names its ``request``): other requests are other images."""
    if not any(c.outputs for c in cells):
        return None
    by_request: dict[int | None, list[Cell]] = {}
    for cell in cells:
        by_request.setdefault(cell.request["index"] if cell.request else None, []).append(cell)
    checks = []
    for request, group in by_request.items():
        checks += [{**check, **({} if request is None else {"request": request})}
                   for check in _checks(group, arms, baseline, thresholds, engine_levels)]
    return {"passed": all(c["passed"] for c in checks), "checks": checks}


def _checks(cells: Sequence[Cell], arms: Mapping[str, Mapping[str, Any]], baseline: str,
            thresholds: Mapping[str, Thresholds] | None, engine_levels: Sequence[str] | None) -> list[dict[str, Any]]:
    """The checks of cells that must all show the same image: one request's."""
    ordered = sorted(arms, key=lambda a: (a != baseline, a))  # baseline first: stable whatever the dict order
    by_level: dict[str, list[str]] = {}
    lossy = []
    for arm in ordered:
        level = arms[arm].get("quality")
        if level_semantics(level, engine_levels) in IDENTITY_SEMANTICS:
            by_level.setdefault(canonical_level(level, engine_levels), []).append(arm)
        else:
            lossy.append(arm)
    checks = [byte_identity(cells, group, level) for level, group in by_level.items()]
    reference = next((c for c in sorted(cells, key=lambda c: c.index) if c.arm == baseline and _judged(c)
                      and c.outputs), None)
    for arm in lossy:
        spec = arms[arm]
        if reference is None:
            checks.append({"kind": "similarity", "arm": arm, "quality": spec.get("quality"),
                           "reference": {"cell": None, "arm": baseline, "path": ""},
                           "thresholds": (thresholds or DEFAULT_THRESHOLDS)["image"].to_json(), "results": [],
                           "errors": [f"no valid {baseline} cell with an output to use as the reference"],
                           "passed": False})
            continue
        checks.append(similarity(cells, arm, spec.get("quality"), reference, thresholds))
    return checks
