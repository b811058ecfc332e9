"""sglang-diffusion-benchmark-profile: tools that benchmark and profile SGLang's diffusion engine.

The package holds the logic; the thin files in ``scripts/`` (and the console scripts declared in
``pyproject.toml``) only parse arguments and call into ``sgl_diffusion_bench.cli``. Package modules never print
to stdout, read ``sys.argv`` or call ``sys.exit``: the CLI layer in ``cli/`` does.
"""

__version__ = "0.1.0"
