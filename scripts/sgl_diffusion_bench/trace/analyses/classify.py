"""Hot kernels labelled with their fast-path family, and unfused chains a family would replace (guard misses)."""

from __future__ import annotations

from ...fast_paths import UNCLASSIFIED, Registry, find_chains
from ..model import KERNEL, Trace
from .hotspots import analyze_kernels

_NO_FAMILY = {"family": UNCLASSIFIED, "family_name": None, "enablement": None, "guards": None, "first_check": None,
              "sglang": {}}


def _streams(trace: Trace) -> list[list[int]]:
    """Kernel rows per device stream, in start order."""
    dev = trace.device
    by_stream: dict[int, list[int]] = {}
    for i in range(len(dev)):
        if dev.kind[i] == KERNEL:
            by_stream.setdefault(dev.thread[i], []).append(i)
    return [sorted(rows, key=lambda i: dev.ts[i]) for _, rows in sorted(by_stream.items())]


NO_DEVICE_KERNELS_NOTE = ("this trace has no device kernels, so there is nothing to classify (a CPU-only run: the "
                          "fast-path families are GPU kernels); read its CPU ops by self time with "
                          "'analyze_trace.py hotspots'")


def classify_trace(trace: Trace, registry: Registry, top: int = 20) -> dict:
    """Hot kernels with their families; ``no_device_kernels`` (and a ``note``) when the trace has none at all."""
    table = analyze_kernels(trace)
    family_of = {r["name"]: registry.classify(r["name"]) for r in table}
    hot = []
    for row in table[:top]:
        family = family_of[row["name"]]
        hot.append({**{k: row[k] for k in ("name", "count", "total_us", "share")},
                    **(family.summary() if family else _NO_FAMILY)})
    families: dict[str, dict] = {}
    for row in table:
        family = family_of[row["name"]]
        if family:
            entry = families.setdefault(family.id, {"family_name": family.name, "kernels": 0, "total_us": 0.0,
                                                    "share": 0.0})
            entry["kernels"] += row["count"]
            entry["total_us"] = round(entry["total_us"] + row["total_us"], 3)
            entry["share"] = round(entry["share"] + row["share"], 6)
    chains, chain_members = [], {}
    dev, names = trace.device, trace.names
    streams = _streams(trace)
    for family in registry.families:
        if family.chain is None:
            continue
        occurrences, chain_us, example = 0, 0.0, None
        for rows in streams:
            stream_names = [names[dev.name[i]] for i in rows]
            for first, last in find_chains(stream_names, family.chain):
                occurrences += 1
                chain_us += sum(dev.dur[i] for i in rows[first:last + 1])
                if example is None:
                    example = stream_names[first:last + 1]
                for name in stream_names[first:last + 1]:
                    if any(p.search(name) for p in family.chain.steps):
                        chain_members.setdefault(name, set()).add(family.id)
        if occurrences:
            chains.append({**family.summary(), "occurrences": occurrences, "window_us": round(chain_us, 3),
                           "replaces": family.replaces, "example": example,
                           "fused_kernel_seen": family.id in families})
    for row in hot:
        row["in_unfused_chains"] = sorted(chain_members.get(row["name"], ()))
    classified_share = round(sum(f["share"] for f in families.values()), 6)
    return {"hot": hot, "families": dict(sorted(families.items())), "chains": chains,
            "classified_share": classified_share, "no_device_kernels": not table,
            "note": NO_DEVICE_KERNELS_NOTE if not table else None}
