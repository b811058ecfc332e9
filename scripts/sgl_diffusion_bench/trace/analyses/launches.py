"""Host-side launch cost: per-kernel launch API calls (runtime + driver) and CUDA-graph replays, by API name."""

from __future__ import annotations

import re
from typing import Iterable

from ..model import Trace

# cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel, cuLaunchKernelEx, cudaLaunchCooperativeKernel, ...
KERNEL_LAUNCH_API = re.compile(r"^cu(?:da)?Launch(?:Cooperative)?Kernel")
GRAPH_LAUNCH_API = re.compile(r"^cu(?:da)?GraphLaunch")
# CUPTI writes "INVALID" when it cannot name a callback; torch.profiler's own key_averages() leaves those out.
UNRESOLVED_CALL = "INVALID"


def analyze_launches(trace: Trace, rows: Iterable[int] | None = None) -> dict:
    """Counts of every runtime/driver call by name, split into kernel launches and graph launches."""
    names = trace.names
    calls = trace.calls.name
    runtime_calls: dict[str, int] = {}
    for i in (range(len(calls)) if rows is None else rows):
        name = names[calls[i]]
        runtime_calls[name] = runtime_calls.get(name, 0) + 1
    unresolved = runtime_calls.pop(UNRESOLVED_CALL, 0)
    launches = {n: c for n, c in runtime_calls.items() if KERNEL_LAUNCH_API.match(n)}
    graph = sum(c for n, c in runtime_calls.items() if GRAPH_LAUNCH_API.match(n))
    return {"launches": dict(sorted(launches.items())), "host_launches": sum(launches.values()),
            "graph_launches": graph, "runtime_calls": dict(sorted(runtime_calls.items())),
            "unresolved_calls": unresolved}


def is_kernel_launch(name: str) -> bool:
    return bool(KERNEL_LAUNCH_API.match(name))


def is_graph_launch(name: str) -> bool:
    return bool(GRAPH_LAUNCH_API.match(name))
