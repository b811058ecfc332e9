"""Run the reference skill's own benchmark script (shipped inside the sglang wheel) for the side-by-side with ours
(test tooling, not product code).

    python3 run_reference_bench.py MODEL_DIR STEPS -- <the reference script's own arguments>

The reference has no local-model option and its ``flux`` preset needs two GPUs (``--num-gpus=2 --tp-size=2``), so
this loads the script unchanged and only points its ``flux`` entry at MODEL_DIR with the request our ``flux-1gpu``
runs (1024x1024, STEPS steps, guidance 3.5, one GPU, every component resident, torch SDPA), takes ``flux`` off its
gated list (it would otherwise refuse to run without HF_TOKEN, though the directory is local), then calls its main().
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REFERENCE = "multimodal_gen/.agents/skills/sglang-diffusion-benchmark-profile/scripts/bench_diffusion_denoise.py"


def load_reference():
    path = Path(importlib.util.find_spec("sglang").origin).parent / REFERENCE
    spec = importlib.util.spec_from_file_location("reference_bench_diffusion_denoise", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    model_dir, steps, sep, *reference_args = sys.argv[1:]
    if sep != "--":
        raise SystemExit(__doc__)
    reference = load_reference()
    # Its gate asks for HF_TOKEN before running a gated repo's preset; a local directory needs no token.
    reference.GATED_MODELS.discard("flux")
    reference.MODELS["flux"] = {**reference.MODELS["flux"], "path": model_dir, "extra_args": [
        "--width=1024", "--height=1024", f"--num-inference-steps={steps}", "--guidance-scale=3.5",
        "--component-residency=all=resident", "--attention-backend=torch_sdpa"]}
    sys.argv = [REFERENCE.rsplit("/", 1)[-1], "--model", "flux", *reference_args]
    reference.main()
