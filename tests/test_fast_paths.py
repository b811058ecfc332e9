"""The fast-path registry is data checked by its schema; it covers every upstream family and classifies names."""

from __future__ import annotations

import copy

import pytest
import yaml

from sgl_diffusion_bench import contract, fast_paths

UPSTREAM_IDS = [str(i) for i in range(1, 17)] + ["K1", "K2", "K3", "K4", "Q1", "Q2", "N1", "N2", "S1"] + \
    [f"C{i}" for i in range(1, 8)]


def _document():
    return yaml.safe_load(fast_paths.REGISTRY_PATH.read_text())


def test_every_upstream_family_is_present_with_guidance():
    registry = fast_paths.load_registry()
    ids = [f.id for f in registry.families]
    assert set(UPSTREAM_IDS) <= set(ids) and len(ids) == len(set(ids))
    for family in registry.families:
        assert family.first_check and family.guards and family.enablement and family.replaces


def test_versions_record_what_0_5_10_post1_lacks():
    registry = fast_paths.load_registry()
    assert registry.by_id("4").sglang["0.5.10.post1"] == "absent"  # quality fusions
    assert registry.by_id("C6").sglang["0.5.10.post1"] == "absent"  # breakable CUDA graph
    assert registry.by_id("Q2").sglang["0.5.10.post1"] == "present"


@pytest.mark.parametrize("kernel,family", [
    ("void (anonymous namespace)::fused_qknorm_rope_warp<128l, 128l, false, true, __nv_bfloat16, long>(P)", "Q2"),
    ("fused_inplace_qknorm_kernel<128>", "Q1"),
    ("void (anonymous namespace)::timestep_embedding_kernel<true, float>(float const*, float*, int)", "T1"),
    ("fuse_scale_shift_kernel", "1"),
    ("triton_group_norm_silu_kernel", "13"),
    ("ncclDevKernel_AllToAll_RING", "C1"),
    ("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", None),
])
def test_classify_kernel_names(kernel, family):
    found = fast_paths.load_registry().classify(kernel)
    assert (found.id if found else None) == family


def test_chain_finder_respects_order_and_gap():
    chain = fast_paths.Chain((fast_paths.re.compile("norm"), fast_paths.re.compile("rope")), max_gap=2)
    assert fast_paths.find_chains(["norm", "x", "rope", "norm", "x", "x", "rope"], chain) == [(0, 2)]
    assert fast_paths.find_chains(["rope", "norm"], chain) == []


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["families"][0].pop("first_check"), "first_check"),
    (lambda d: d["families"][0].__setitem__("patterns", ["(unclosed"]), "bad regex"),
    (lambda d: d["families"][1].__setitem__("id", d["families"][0]["id"]), "id used twice"),
    (lambda d: d["families"][0]["sglang"].__setitem__("0.5.10.post1", "maybe"), "sglang"),
])
def test_bad_registry_is_an_input_error_naming_the_entry(tmp_path, mutate, needle):
    document = copy.deepcopy(_document())
    mutate(document)
    path = tmp_path / "fast_paths.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(contract.InputError) as info:
        fast_paths.load_registry(path)
    assert needle in info.value.message and info.value.exit_code == 2


def test_family_table_lists_every_family():
    table = fast_paths.render_family_table()
    assert table.count("\n") == len(fast_paths.load_registry().families) + 2
    assert "| Q2 | Fused QK norm + RoPE |" in table


def test_quality_levels_say_per_release_which_fusions_a_level_mounts():
    registry = fast_paths.load_registry()
    assert registry.quality_fusions("0.5.23", "exact") == ()  # exact keeps the eager numerics on 0.5.23
    assert [f.id for f in registry.quality_fusions("0.5.23", "lossless")] == ["4"]
    assert registry.quality_fusions("0.5.23", "extra-high") == registry.quality_fusions("0.5.23", "lossless")
    assert registry.quality_fusions("main-before-rename", "lossless") == ()  # before the rename lossless was eager
    with pytest.raises(contract.InputError):
        registry.quality_fusions("0.5.10.post1", "lossless")  # no --quality on 0.5.10.post1
