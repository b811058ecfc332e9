"""--validate-nightly-alignment against a comparison config written from the reference facts: it passes as written
and fails with a precise message when any one compared field changes."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import TEST_FIXTURES, run_main
from sgl_diffusion_bench import nightly, presets

CONFIG = TEST_FIXTURES / "nightly" / "comparison_configs.json"


def _check(config):
    return nightly.check_alignment(presets.load_presets(), config)


def test_the_reference_config_passes_with_unknowns_reported_unverified():
    result = _check(nightly.load_config(CONFIG))
    assert result["ok"] and result["order_ok"] and result["problems"] == []
    minimax = next(r for r in result["presets"] if r["preset"] == "minimax-h3-t2va")
    assert [u["field"] for u in minimax["unverified"]] == ["prompt"]  # the bundle's own text, never "matching"
    assert "prompt_source: bundle" in minimax["unverified"][0]["reason"]
    assert sum(len(r["unverified"]) for r in result["presets"]) == 1


def _case(config, case_id):
    return next(c for c in config["cases"] if c["id"] == case_id)


def _set_serve_args(case, text):
    case["frameworks"]["sglang"]["serve_args"] = text


@pytest.mark.parametrize("edit, expected", [
    (lambda c: _case(c, "flux1_dev_t2i_1024").update(seed=43), "flux: seed differs: preset 42 vs case 43"),
    (lambda c: _case(c, "qwen_image_2512_t2i_1024").update(model="Qwen/Qwen-Image"),
     "qwen: model path differs: preset 'Qwen/Qwen-Image-2512' vs case 'Qwen/Qwen-Image'"),
    (lambda c: _case(c, "zimage_turbo_t2i_1024").update(prompt="A cat"),
     "zimage: prompt differs: preset 'A futuristic cyberpunk city at night, neon lights reflecting on wet streets' "
     "vs case 'A cat'"),
    (lambda c: _case(c, "wan22_ti2v_5b_720p").pop("reference_image"),
     "wan-ti2v: image presence differs: preset has image=True, case has reference_image=False"),
    (lambda c: _case(c, "cosmos3_super_t2v_2gpu")["frameworks"]["sglang"].update(extra_env={}),
     "cosmos3-super-t2v: env differs: SGLANG_DISABLE_COSMOS3_GUARDRAILS: preset '1' vs case '<absent>'"),
    (lambda c: _case(c, "wan22_t2v_a14b_720p").update(num_frames=121),
     "wan-t2v: CLI args differ: num-frames: preset '81' vs case '121'"),
    (lambda c: _case(c, "wan22_i2v_a14b_720p").update(num_gpus=8),
     "wan-i2v: CLI args differ: num-gpus: preset '4' vs case '8'"),
    (lambda c: _set_serve_args(_case(c, "ideogram4_fp8_t2i_2gpu"), "--tp-size 2 --attention-backend fa3"),
     "ideogram4-fp8: CLI args differ: attention-backend: preset 'fa' vs case 'fa3'"),
    (lambda c: _set_serve_args(_case(c, "qwen_image_edit_2511"), "--tp-size 2 --enable-cfg-parallel"),
     "qwen-edit: CLI args differ: enable-cfg-parallel: preset '<absent>' vs case 'true'"),
    (lambda c: _case(c, "flux2_dev_t2i_1024").update(guidance_scale=4.0),
     "flux2: CLI args differ: guidance-scale: preset '<absent>' vs case '4'"),
    (lambda c: _case(c, "minimax_h3_t2va_5s")["sglang_request_extra"].update(flow_shift=7.0),
     "minimax-h3-t2va: generated request config differs: flow_shift: preset 12.0 vs case 7.0"),
    (lambda c: _case(c, "minimax_h3_t2va_5s").update(num_inference_steps=40),
     "minimax-h3-t2va: generated request config differs: num_inference_steps: preset 50 vs case 40"),
    (lambda c: _set_serve_args(_case(c, "minimax_h3_t2va_5s"),
                               "--model-variant fl2va --tp-size 2 --ulysses-degree 2 --performance-mode speed "
                               "--enable-torch-compile true"),
     "minimax-h3-t2va: CLI args differ: enable-torch-compile: preset 'false' vs case 'true'"),
    (lambda c: c["cases"].insert(0, c["cases"].pop(1)), "nightly case order differs"),
    (lambda c: c["cases"].append({"id": "new_case_1", "model": "x"}), "nightly case order differs"),
    (lambda c: _case(c, "flux1_dev_t2i_1024").update(id="flux1_dev_t2i_2048"),
     "flux: case 'flux1_dev_t2i_1024' is not in the nightly config"),
])
def test_one_changed_field_fails_with_a_precise_message(edit, expected):
    config = copy.deepcopy(nightly.load_config(CONFIG))
    edit(config)
    result = _check(config)
    assert not result["ok"]
    assert any(m.startswith(expected) for m in result["problems"]), result["problems"]


def test_ignored_and_warmup_keys_do_not_count():
    config = copy.deepcopy(nightly.load_config(CONFIG))
    _case(config, "minimax_h3_t2va_5s").update(width=1, height=1, fps=1, num_frames=1)  # nightly_cli_ignored
    _set_serve_args(_case(config, "qwen_image_2512_t2i_1024"), "--tp-size=2 --warmup --warmup-mode server")
    _case(config, "flux1_dev_t2i_1024")["sglang_request_extra"] = {"ignored_for_presets_without_config": 1}
    assert _check(config)["ok"]


def test_cli_passes_and_fails_with_exit_codes(tmp_path):
    ok = run_main("bench_diffusion_denoise", "--validate-nightly-alignment", "--nightly-config", str(CONFIG), "--json")
    assert ok.returncode == 0 and ok.document["schema"] == "nightly-check.v1" and ok.document["ok"]
    config = json.loads(CONFIG.read_text())
    _case(config, "wan22_ti2v_5b_720p")["seed"] = 0
    changed = tmp_path / "comparison_configs.json"
    changed.write_text(json.dumps(config))
    bad = run_main("bench_diffusion_denoise", "--validate-nightly-alignment", "--nightly-config", str(changed),
                   "--json")
    assert bad.returncode == 1 and not bad.document["ok"]
    assert bad.document["problems"] == ["wan-ti2v: seed differs: preset 42 vs case 0"]
    text = run_main("bench_diffusion_denoise", "--validate-nightly-alignment", "--nightly-config", str(changed))
    assert "Nightly alignment check failed:\n- wan-ti2v: seed differs" in text.stderr


def test_missing_or_malformed_config(tmp_path):
    missing = run_main("bench_diffusion_denoise", "--validate-nightly-alignment", "--nightly-config",
                       str(tmp_path / "nope.json"), "--json")
    assert missing.returncode == 3 and missing.document["error"]["code"] == "nightly.config_missing"
    assert "Missing nightly config" in missing.document["error"]["message"]
    malformed = tmp_path / "bad.json"
    malformed.write_text(json.dumps({"cases": [{"model": "x"}]}))
    bad = run_main("bench_diffusion_denoise", "--validate-nightly-alignment", "--nightly-config", str(malformed),
                   "--json")
    assert bad.returncode == 2 and bad.document["error"]["code"] == "input.nightly_config_invalid"


UPSTREAM = TEST_FIXTURES / "nightly" / "upstream" / "comparison_configs.json"


def test_the_upstream_config_as_upstream_writes_it_is_checked_not_refused(tmp_path):
    """sglang's real comparison_configs.json (reference_image: true) is read and compared field by field; its one
    drift from the catalog is the consumer case no preset mirrors, named by the order check."""
    upstream = json.loads(UPSTREAM.read_text())
    assert sum(c.get("reference_image") is True for c in upstream["cases"]) == 5
    run = run_main("bench_diffusion_denoise", "--validate-nightly-alignment", "--nightly-config", str(UPSTREAM),
                   "--json")
    assert run.returncode == 1 and run.document["schema"] == "nightly-check.v1"
    (problem,) = run.document["problems"]
    assert problem.startswith("nightly case order differs") and "minimax_h3_i2va_5090_consumer" in problem
    assert all(row["ok"] for row in run.document["presets"]) and len(run.document["presets"]) == 12
    upstream["cases"] = [c for c in upstream["cases"] if c["id"] != "minimax_h3_i2va_5090_consumer"]
    known = tmp_path / "comparison_configs.json"
    known.write_text(json.dumps(upstream))
    passed = run_main("bench_diffusion_denoise", "--validate-nightly-alignment", "--nightly-config", str(known),
                      "--json")
    assert passed.returncode == 0 and passed.document["ok"], passed.document["problems"]
    _case(upstream, "qwen_image_edit_2511")["reference_image"] = False
    known.write_text(json.dumps(upstream))
    edited = run_main("bench_diffusion_denoise", "--validate-nightly-alignment", "--nightly-config", str(known),
                      "--json")
    assert edited.document["problems"] == [
        "qwen-edit: image presence differs: preset has image=True, case has reference_image=False"]


@pytest.mark.parametrize("value", [1, [], {"path": "cat.png"}])
def test_a_reference_image_that_is_neither_a_flag_nor_a_path_is_refused(tmp_path, value):
    config = json.loads(UPSTREAM.read_text())
    _case(config, "qwen_image_edit_2511")["reference_image"] = value
    bad = tmp_path / "comparison_configs.json"
    bad.write_text(json.dumps(config))
    run = run_main("bench_diffusion_denoise", "--validate-nightly-alignment", "--nightly-config", str(bad), "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "input.nightly_config_invalid"
    assert "reference_image" in run.document["error"]["message"]
