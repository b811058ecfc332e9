"""What a campaign's cells add up to: per-arm statistics and the change's interval, steady state, per-request
verdicts, perf-dump comparisons, and the report (JSON, Markdown, plot) that states each number once."""
