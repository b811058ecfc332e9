"""The figures of one block of requests, named as the engine's ``bench_serving.calculate_metrics`` names them
(seconds; ``latency_p50`` ...), so a block compares with an upstream run; plus goodput under an SLO and the server's
own inference time. Pure.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from .load import RequestResult

PERCENTILES = (50, 90, 95, 99)
# The figures a verdict is drawn on, and which way is better.
VERDICT_METRICS = (("latency_p50", "lower"), ("latency_p99", "lower"), ("throughput_qps", "higher"))


def percentile(values: Sequence[float], pct: float) -> float:
    """numpy's default (linear) percentile, as bench_serving's np.percentile; values must be non-empty."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def block_metrics(results: Sequence[RequestResult], duration: float, slo_ms: float | None) -> dict[str, Any]:
    """bench_serving's metrics of one block (only successful requests' latencies count, as upstream), the error
    count and messages, goodput (successful requests within ``slo_ms`` per second) and the server-side times."""
    ok = [r for r in results if r.success]
    latencies = [r.latency for r in ok]
    outputs = sum(r.output_count for r in ok)
    per_s = (lambda n: n / duration) if duration > 0 else (lambda n: 0.0)
    doc: dict[str, Any] = {
        "duration": duration, "completed_requests": len(ok), "completed_outputs": outputs,
        "failed_requests": len(results) - len(ok), "throughput_qps": per_s(len(ok)),
        "output_throughput_ops": per_s(outputs),
        "latency_mean": statistics.fmean(latencies) if latencies else None,
        "latency_median": statistics.median(latencies) if latencies else None,
    }
    for pct in PERCENTILES:
        doc[f"latency_p{pct}"] = percentile(latencies, pct) if latencies else None
    server = [r.inference_time_s for r in ok if r.inference_time_s is not None]
    doc["inference_time_s_mean"] = statistics.fmean(server) if server else None
    doc["inference_time_s_p50"] = percentile(server, 50) if server else None
    delays = [r.queue_delay_s for r in results if r.queue_delay_s is not None]
    doc["send_lag_s_max"] = max(delays) if delays else None
    if slo_ms is not None:
        met = sum(1 for r in ok if r.latency * 1000.0 <= slo_ms)
        doc.update(slo_ms=slo_ms, slo_met_success=met,
                   slo_attainment_rate=met / len(results) if results else 0.0, goodput_qps=per_s(met))
    doc["errors"] = sorted({r.error for r in results if not r.success})[:10]
    return doc


def pooled(blocks: Sequence[Sequence[RequestResult]], durations: Sequence[float], slo_ms: float | None
           ) -> dict[str, Any]:
    """One arm's figures over all its blocks at a load point: the requests pooled, the durations summed."""
    return block_metrics([r for block in blocks for r in block], sum(durations), slo_ms)


def output_identity(arm_hashes: dict[str, dict[str, set[str]]]) -> dict[str, Any]:
    """Per request id, whether every output of both arms had the same bytes, and where they did not: within an arm
    (its own outputs vary across blocks) or only between the arms (each arm stable, the two apart). ``arm_hashes``:
    arm -> request id -> the set of output hashes seen."""
    ids = sorted(set().union(*(set(h) for h in arm_hashes.values())))
    unstable = {arm: [i for i in ids if len(hashes.get(i, set())) > 1] for arm, hashes in arm_hashes.items()}
    differ = [i for i in ids if len(set().union(*(h.get(i, set()) for h in arm_hashes.values()))) > 1]
    between = [i for i in differ if not any(i in ids_ for ids_ in unstable.values())]
    compared = [i for i in ids if all(arm_hashes[arm].get(i) for arm in arm_hashes)]
    return {"compared_requests": len(compared), "identical": not differ and bool(compared),
            "differing_request_ids": differ, "unstable_within_arm": unstable, "differ_between_arms_only": between}
