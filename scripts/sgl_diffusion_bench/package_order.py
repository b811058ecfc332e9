"""Which module may import which (data/package_order.yaml): the layers from the bottom up, the rooms of each, and
today's private-member reads. tests/test_architecture.py checks the import graph against it; CONTRIBUTING.md's layer
table is rendered from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import datafile

ORDER_PATH = Path(__file__).resolve().parent / "data" / "package_order.yaml"


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a module sits: its layer (0 is the bottom), the layer's name and its room."""

    level: int
    layer: str
    room: str


@dataclasses.dataclass(frozen=True)
class PackageOrder:
    layers: tuple[dict, ...]
    private_access: frozenset[str]

    def place(self, module: str) -> Place | None:
        """``module`` relative to the package, slash-separated (``evidence/verify``, ``stats``, ``__init__``)."""
        top = module.split("/")[0]
        for level, layer in enumerate(self.layers):
            for room, modules in _rooms(layer).items():
                if module in modules or (top + "/") in modules:
                    return Place(level, layer["name"], room)
        return None

    def allows(self, importer: Place, imported: Place) -> bool:
        """Down the layers, or within one room; never sideways between the peer rooms of a layer."""
        return imported.level < importer.level or (imported.level == importer.level and imported.room == importer.room)


def _rooms(layer: dict) -> dict[str, list[str]]:
    return layer["rooms"] if "rooms" in layer else {layer["name"]: layer["modules"]}


def load(path: Path = ORDER_PATH) -> PackageOrder:
    doc = datafile.load(path, "package-order.v1")
    return PackageOrder(tuple(doc["layers"]), frozenset(doc["private_access"]))


def render_layer_table() -> str:
    """CONTRIBUTING.md's layer table, top layer first."""
    lines = ["| Layer | Rooms and modules | What it does |", "|---|---|---|"]
    for layer in reversed(load().layers):
        rooms = "; ".join(f"{room}: " + ", ".join(f"`{m}`" for m in modules) if "rooms" in layer
                          else ", ".join(f"`{m}`" for m in modules) for room, modules in _rooms(layer).items())
        lines.append(f"| {layer['name']} | {rooms} | {layer['what']} |")
    return "\n".join(lines) + "\n"
