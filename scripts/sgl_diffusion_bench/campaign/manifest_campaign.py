"""What a request manifest makes of a campaign's cells: the preset each request runs as, and the identity its cell
records (which request, which shape), so every cell can be traced to its manifest line and judged with its own kind.

A manifest request replaces the preset's request fields it sets (prompt, size, seed, steps, negative prompt, guidance,
frames, fps); a field it leaves out keeps the preset's value, as a line without a size takes the preset's size. BCG
arms warm up at every size of the manifest, so one engine serves all of its requests.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..presets import Preset
from ..engine.request_manifest import Manifest, preset_fields


def warmup_resolutions(preset: Preset, manifest: Manifest) -> tuple[str, ...]:
    """Every size a BCG arm warms up at: the preset's, then each manifest size once (computed once per campaign:
    per request it made planning a 10^5-line manifest quadratic)."""
    sizes = [*preset.bcg_warmup_resolutions, *(f"{r.width}x{r.height}" for r in manifest.requests)]
    return tuple(dict.fromkeys(sizes))


def request_preset(preset: Preset, manifest: Manifest, index: int, resolutions: tuple[str, ...]) -> Preset:
    """``preset`` as manifest request ``index`` runs it; ``resolutions`` is warmup_resolutions(preset, manifest)."""
    return dataclasses.replace(preset, **preset_fields(manifest.requests[index]), bcg_warmup_resolutions=resolutions)


def cell_request(preset: Preset, manifest: Manifest, index: int) -> dict[str, Any]:
    """A cell's ``request``: the manifest request it sent and the shape it ran (after the arm's own overrides)."""
    spec = manifest.requests[index]
    return {"index": index, "request_id": spec.request_id, "line": spec.line, "width": preset.width,
            "height": preset.height, "num_frames": preset.num_frames, "num_inference_steps": preset.num_inference_steps}
