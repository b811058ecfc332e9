"""results: stats, perf_compare, report, steady_state, request_verdicts."""
