"""Markdown/text renderings of trace analysis results; they read result dicts only, never the trace."""

from __future__ import annotations


def _fmt(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3f}"
    if isinstance(value, float):  # a per-step mean of counts that divides evenly reads as a count
        return f"{int(value):,}"
    return f"{value:,}"


def _short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def render_compare_markdown(result: dict, verdict: dict) -> str:
    """The profile table, under the verdict's word when the host was contended or its load is unknown."""
    a, b = result["labels"]["a"], result["labels"]["b"]
    steps = result["steps"]
    lines = []
    if verdict["status"] == "withheld_contended":
        lines += [f"**Verdict withheld (host contended)**: {verdict['reason']}.", ""]
    elif verdict["status"] == "host_load_unknown":
        lines += [f"**Host load unknown**: {verdict['reason']}.", ""]
    lines += [f"Scope: {result['scope']} ({steps['a']} / {steps['b']} denoise steps).", ""]
    kernels = next((m for m in result["metrics"] if m["key"] == "gpu_kernels"), None)
    no_device = kernels is not None and not kernels["a"] and not kernels["b"]
    empty = [m for m in result["metrics"] if no_device and not m["a"] and not m["b"]]
    if empty:  # a CPU run: rows of device figures that are zero on both sides say nothing
        lines += [f"Neither trace has a device kernel (a CPU run): {len(empty)} device rows with no data left out "
                  f"({', '.join(m['label'] for m in empty)}).", ""]
    lines += [f"| Diagnostic | {a} | {b} |", "|---|---:|---:|"]
    for m in result["metrics"]:
        if m not in empty:
            lines.append(f"| {m['label']} | {_fmt(m['a'])} | {_fmt(m['b'])} |")
    if result["time_changes"]:
        lines += ["", "Kernels whose time changed most:", "",
                  f"| Kernel | count {a} | count {b} | us {a} | us {b} | delta us |", "|---|---:|---:|---:|---:|---:|"]
        for c in result["time_changes"][:10]:
            lines.append(f"| `{_short(c['name'])}` | {c['count_a']} | {c['count_b']} | {_fmt(c['total_us_a'])} | "
                         f"{_fmt(c['total_us_b'])} | {_fmt(c['delta_us'])} |")
    return "\n".join(lines) + "\n"


def render_hotspots_text(body: dict, top: int = 10) -> str:
    """The kernel table for a trace with device kernels; the CPU-op self-time table for one without (a CPU run)."""
    info = body["trace"]
    if body["kernels_total"]["count"]:
        return "\n".join([*_kernel_lines(body, top), *_stage_lines(body)])
    total = body["cpu_ops_total"]
    lines = [f"{info['path']}: no device kernels (a CPU-only trace); {total['count']:,} CPU ops, "
             f"{total['self_us'] / 1000:,.3f} ms inside ops (stages from {info['stage_source']})",
             "  CPU ops by self time (nested ops' time taken out, so each instant counts once):"]
    for row in body["cpu_ops"][:top]:
        lines.append(f"  {row['self_us'] / 1000:10.3f} ms {row['share'] * 100:5.1f}% x{row['count']:<6} "
                     f"{_short(row['name'], 80)} (inclusive {row['inclusive_us'] / 1000:,.3f} ms)")
    for name, s in body["stages"].items():
        lines.append(f"  stage {name}: CPU {s['cpu_us'] / 1000:.3f} ms, {s['cpu_ops']} CPU ops")
    d = body["denoise"]
    if d and d["per_step"]:
        lines.append(f"  per denoise step ({d['steps']} steps): CPU {d['per_step']['cpu_us'] / 1000:.3f} ms")
    return "\n".join(lines)


def _kernel_lines(body: dict, top: int) -> list[str]:
    info = body["trace"]
    lines = [f"{info['path']}: {body['kernels_total']['count']:,} kernels, "
             f"{body['kernels_total']['total_us'] / 1000:,.3f} ms device time; "
             f"{body['host_launches']:,} host launches, "
             f"{body['graph_launches']} graph launches (stages from {info['stage_source']})"]
    for row in body["kernels"][:top]:
        lines.append(f"  {row['total_us'] / 1000:10.3f} ms {row['share'] * 100:5.1f}% x{row['count']:<6} "
                     f"{_short(row['name'], 80)}")
    return lines


def _stage_lines(body: dict) -> list[str]:
    lines = [f"  stage {name}: GPU {s['gpu_us'] / 1000:.3f} ms, {s['kernels']} kernels, "
             f"{s['host_launches']} launches, CPU {s['cpu_us'] / 1000:.3f} ms" for name, s in body["stages"].items()]
    d = body["denoise"]
    if d and d["per_step"]:
        p = d["per_step"]
        lines.append(f"  per denoise step ({d['steps']} steps): GPU {p['gpu_us'] / 1000:.3f} ms, "
                     f"{p['kernels']:.0f} kernels, "
                     f"{p['host_launches']:.0f} launches; device idle in denoise {d['idle_share'] * 100:.1f}%")
    return lines


def render_classify_text(result: dict) -> str:
    if result["no_device_kernels"]:
        return result["note"]
    lines = ["hot kernels:"]
    for row in result["hot"]:
        lines.append(f"  [{row['family']}] {row['share'] * 100:5.1f}% {_short(row['name'], 80)}")
    for chain in result["chains"]:
        lines.append(f"unfused chain for {chain['family']} ({chain['family_name']}): {chain['occurrences']}x; "
                     f"first check: {chain['first_check']}")
    return "\n".join(lines)
