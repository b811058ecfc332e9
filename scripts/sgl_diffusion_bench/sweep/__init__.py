"""Sweeps (issue 27): many presets' campaigns as shards on one host, a Slurm cluster or a Ray cluster, one report.

spec (the YAML sweep-spec.v1 and its shards), plan (commands, hashes, cost estimates), state (the sweep folder: what
each shard did), worker (runs one shard wherever an executor put it), executors/ (local, slurm, ray), merge (the
sweep-report.v1, its Markdown and plots). A shard is one whole campaign of one preset: its A/B/B/A pairs never span
jobs or nodes.
"""
