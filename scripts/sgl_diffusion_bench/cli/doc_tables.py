"""Tables in the skill docs are generated from the bundle's data, so the docs cannot drift from it.

A generated block sits between ``<!-- BEGIN GENERATED: name -->`` and ``<!-- END GENERATED: name -->``; its
renderer is a function ``(*args) -> str`` named in ``RENDERERS`` as ``module:function[:arg]``.
``python3 -m sgl_diffusion_bench.cli.doc_tables --write`` rewrites the blocks; ``--check`` (run by the tests) fails when
any block differs from the data.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from .options_reference import entry_points
from ..paths import CHECKOUT_ROOT

RENDERERS = {
    "presets": "sgl_diffusion_bench.presets:render_preset_table",
    "fast-path-families": "sgl_diffusion_bench.fast_paths:render_family_table",
    "error-codes": "sgl_diffusion_bench.error_codes:render_error_table",
    "package-order": "sgl_diffusion_bench.package_order:render_layer_table",  # CONTRIBUTING.md
    # README.md: every script in scripts/; reference/options.md: each one's options, from its own parser
    "scripts": "sgl_diffusion_bench.cli.options_reference:render_script_list",
    **{f"options-{cli}": f"sgl_diffusion_bench.cli.options_reference:render:{cli}"
       for cli in entry_points().values()},
}
DOCS = ("README.md", "CONTRIBUTING.md", "SKILL.md", "benchmark-and-profile.md", "existing-fast-paths.md",
        "reference/presets.md", "reference/troubleshooting.md", "reference/options.md")
BLOCK = re.compile(r"(<!-- BEGIN GENERATED: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)"
                   r"(<!-- END GENERATED: (?P=name) -->)", re.S)


def render(name: str) -> str:
    module_name, func, *args = RENDERERS[name].split(":")
    return getattr(importlib.import_module(module_name), func)(*args).rstrip("\n") + "\n"


def sync_text(text: str) -> tuple[str, list[str]]:
    """The text with every generated block re-rendered, and the names of blocks that changed."""
    changed: list[str] = []

    def replace(match: re.Match) -> str:
        fresh = render(match["name"])
        if fresh != match["body"]:
            changed.append(match["name"])
        return match.group(1) + fresh + match.group(4)

    return BLOCK.sub(replace, text), changed


def sync_docs(root: Path = CHECKOUT_ROOT, write: bool = False) -> dict[str, list[str]]:
    stale: dict[str, list[str]] = {}
    for doc in DOCS:
        path = root / doc
        if not path.exists():
            continue
        text, changed = sync_text(path.read_text(encoding="utf-8"))
        if changed:
            stale[doc] = changed
            if write:
                path.write_text(text, encoding="utf-8")
    return stale


if __name__ == "__main__":
    stale = sync_docs(write="--write" in sys.argv)
    for doc, names in stale.items():
        print(f"{doc}: {'rewrote' if '--write' in sys.argv else 'stale'} {', '.join(names)}", file=sys.stderr)
    sys.exit(1 if stale and "--write" not in sys.argv else 0)
