"""The preset catalog: the reference's 78 presets in order, validated at load, filterable, rendered for the docs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from conftest import run_main
from sgl_diffusion_bench import contract, datafile, presets

NIGHTLY_ORDER = ["flux", "flux2", "qwen", "qwen-edit", "zimage", "wan-t2v", "wan-ti2v", "ltx23-ti2v-two-stage",
                 "ideogram4-fp8", "cosmos3-super-t2v", "wan-i2v", "minimax-h3-t2va"]


REFERENCE_PRESETS = 78  # the upstream skill's catalog; the bundle's locally built presets follow it


def test_catalog_holds_the_reference_presets_in_order_then_ours():
    catalog = presets.load_presets()
    reference = [p for p in catalog if p.local_model is None and "variant" not in p.tags]
    assert len(reference) == REFERENCE_PRESETS and catalog[:len(reference)] == tuple(reference)  # then ours
    assert [p.position for p in catalog] == list(range(1, len(catalog) + 1))
    names = [p.name for p in catalog]
    assert names[:13] == [*NIGHTLY_ORDER[:10], "cosmos3-super-t2v-cfg2tp2", *NIGHTLY_ORDER[10:]]
    assert names[13] == "fasth3-t2va-vsa" and names[77] == "hunyuan3d-shape" and names[78] == "flux-1gpu"
    assert names[79:] == ["tiny-flux-cpu", "tiny-flux-gpu", "tiny-wan-t2v-cpu", "tiny-wan-t2v-gpu",  # then local models
                          "tiny-wan-i2v-cpu", "tiny-wan-i2v-gpu", "tiny-flux2-edit-cpu", "tiny-flux2-edit-gpu"]
    assert [p.name for p in catalog if p.nightly_case_id] == NIGHTLY_ORDER


def test_facts_from_the_reference_table():
    get = presets.get_preset
    assert get("flux").prompt == "A futuristic cyberpunk city at night, neon lights reflecting on wet streets"
    assert get("longcat-image-edit").prompt == "Make the cat wear a red hat."
    assert get("qwen-edit").prompt == "Make the cat wear a red hat"
    assert get("minimax-h3-t2va").seed == 1101 and get("minimax-h3-t2va").force_eager
    assert get("ltx23-one-stage").seed == 1234 and get("ltx23-one-stage").prompt_source == "bundle"
    assert get("minimax-h3-t2va").config_overrides["target"] == {"short_edge": 768, "aspect_ratio": "16:9",
                                                                 "duration_seconds": 5.0}
    assert "--adjust-frames=false" in get("mova-720p").extra_args
    assert get("cosmos3-edge-t2i").env == {"SGLANG_DISABLE_COSMOS3_GUARDRAILS": "1"}
    assert get("lingbot-world").config_overrides == {"actions": [["w"]] * 9}
    assert get("longcat-image-edit").bcg_warmup_resolutions == ("1264x848",)
    assert get("turbowan22-i2v-a14b").guidance_scale == 3.5 and "--guidance-scale-2=3.5" in get(
        "turbowan22-i2v-a14b").extra_args
    assert get("ideogram4-instant").num_inference_steps is None
    for p in presets.load_presets():
        assert p.prompt is None or "P_" not in p.prompt


def test_gpu_counts_are_explicit_data():
    counts = {p.name: p.num_gpus for p in presets.load_presets()}
    assert counts["wan-t2v"] == 4 and counts["mova-720p"] == 4 and counts["cosmos3-super-t2v-cfg2tp2"] == 4
    assert counts["ltx23-one-stage"] == 2 and counts["joyai-edit"] == 2 and counts["flux"] == 2
    assert counts["wan-ti2v"] == 1 and counts["tiny-flux-cpu"] == 0
    assert presets.get_preset("tiny-flux-cpu").all_tags[:2] == ("t2i", "gpus-0")
    assert "cpu" in presets.get_preset("tiny-flux-cpu").all_tags


def test_tiny_flux_cpu_preset():
    p = presets.get_preset("tiny-flux-cpu")
    assert p.local_model == "tiny-flux" and p.model is None
    assert (p.width, p.height, p.num_inference_steps, p.seed) == (64, 64, 2, 42)
    assert p.env == {"HF_HUB_OFFLINE": "1"}
    assert p.extra_args == ("--dit-cpu-offload", "false", "--text-encoder-cpu-offload", "false", "--vae-cpu-offload",
                            "false", "--image-encoder-cpu-offload", "false", "--pin-cpu-memory", "false")


def _catalog_with(tmp_path: Path, mutate) -> Path:
    document = yaml.safe_load(presets.PRESETS_FILE.read_text())
    mutate(document["presets"])
    path = tmp_path / "presets.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


SCHEMA, RULES = datafile.DATA_FILE_INVALID, "input.presets_invalid"


@pytest.mark.parametrize("mutate, code, expected", [
    (lambda ps: ps[2].update(seed="42"), SCHEMA, "presets[2] (name='qwen'), field 'seed'"),
    (lambda ps: ps[0].update(task="txt2img"), SCHEMA, "presets[0] (name='flux'), field 'task'"),
    (lambda ps: ps[5].update(num_gpus=-1), SCHEMA, "presets[5] (name='wan-t2v'), field 'num_gpus'"),
    (lambda ps: ps[0].update(colour="red"), SCHEMA, "presets[0] (name='flux'), field '<entry>'"),
    (lambda ps: ps[1].update(extra_args=["--seed=7"]), RULES, "preset 'flux2' (#2), field 'extra_args': --seed"),
    (lambda ps: ps[3].update(asset="dog"), RULES, "preset 'qwen-edit' (#4), field 'asset'"),
    (lambda ps: ps[4].update(name="flux"), RULES, "preset 'flux' (#5), field 'name': duplicate"),
    (lambda ps: ps[0].pop("prompt"), RULES, "preset 'flux' (#1), field 'prompt'"),
])
def test_a_bad_catalog_is_an_input_error_naming_preset_and_field(tmp_path, mutate, code, expected):
    path = _catalog_with(tmp_path, mutate)
    with pytest.raises(contract.InputError) as info:
        presets.load_presets(path)
    assert info.value.code == code and expected in info.value.message
    assert info.value.exit_code == 2


def test_unparseable_yaml_is_an_input_error(tmp_path):
    path = tmp_path / "presets.yaml"
    path.write_text("presets: [unclosed\n")
    with pytest.raises(contract.InputError) as info:
        presets.load_presets(path)
    assert info.value.code == datafile.DATA_FILE_INVALID and "not valid YAML" in info.value.message


def test_filters():
    catalog = presets.load_presets()
    nightly_small = presets.filter_presets(catalog, tags=["nightly"], max_gpus=1)
    assert [p.name for p in nightly_small] == ["wan-ti2v"]
    edits = presets.filter_presets(catalog, tasks=["edit"])
    assert edits and all(p.task == "edit" for p in edits)
    assert {p.name for p in presets.filter_presets(catalog, tags=["gated"])} == {
        "flux", "flux2", "flux2-klein", "flux2-klein-base", "stable-diffusion-3.5-medium", "flux-1gpu"}
    assert [p.name for p in presets.filter_presets(catalog, tags=["cpu"])] == [
        "tiny-flux-cpu", "tiny-wan-t2v-cpu", "tiny-wan-i2v-cpu", "tiny-flux2-edit-cpu"]


def test_render_preset_table_lists_every_preset():
    table = presets.render_preset_table()
    lines = table.strip().splitlines()
    catalog = presets.load_presets()
    assert len(lines) == 2 + len(catalog)
    for p in catalog:
        assert f"| {p.position} | `{p.name}` |" in table
    assert "yes (bundle prompt)" in table
    incomplete = dataclasses.replace(catalog[0], prompt=None, unknown_fields=("prompt",))
    assert "no: unknown prompt" in presets.render_preset_table([incomplete])


def test_list_models_cli_filters_and_validates():
    run = run_main("bench_diffusion_denoise", "--list-models", "--tag", "nightly", "--max-gpus", "2", "--json")
    assert run.returncode == 0
    doc = run.document
    assert doc["schema"] == "preset-list.v1" and doc["total"] == len(presets.load_presets())
    assert [p["name"] for p in doc["presets"]] == [n for n in NIGHTLY_ORDER if presets.get_preset(n).num_gpus <= 2]
    run = run_main("bench_diffusion_denoise", "--list-models", "--task", "t2va", "--json")
    assert [p["name"] for p in run.document["presets"]] == ["minimax-h3-t2va", "fasth3-t2va-vsa"]


def test_every_preset_is_complete_and_bundle_prompts_say_so():
    """Properties, not counts: a preset with a summarised prompt carries the bundle's own text and says so."""
    for p in presets.load_presets():
        assert p.complete, (p.name, p.unknown_fields)
        assert p.prompt, p.name
        assert p.prompt_source in ("reference", "bundle")
        if p.prompt_summary:  # the reference only summarises: the text is ours
            assert p.prompt_source == "bundle", p.name
    listed = run_main("bench_diffusion_denoise", "--list-models", "--json").document
    assert all(row["complete"] and row["prompt_source"] for row in listed["presets"])
