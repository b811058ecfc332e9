"""Serving-mode A/B (bench_diffusion_serving): two real ``sglang serve`` arms under the same seeded load.

server (lifecycle), requests (what is sent; manifests are read by ..request_manifest), load (traces and the HTTP
client), metrics (bench_serving's figures per block), verdict (blocks as campaign cells, stats' verdict), run (the
order of things), render (Markdown and the latency-vs-rate plot).
"""
