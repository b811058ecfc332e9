"""--budget-minutes: an --until-verdict campaign starts no further round once its time budget is spent; the last
look records why it stopped ("budget") and the verdict stays what that look said."""

from __future__ import annotations

import copy
import json
import time

from conftest import TEST_FIXTURES
from sgl_diffusion_bench import contract, presets
from sgl_diffusion_bench.engine import capabilities
from sgl_diffusion_bench.campaign import bench_runner, design, sequential
from sgl_diffusion_bench.campaign.campaign_context import CampaignContext, CampaignSettings


def _runner(tmp_path, time_budget_s):
    settings = CampaignSettings(label="budget", output_root=tmp_path, time_budget_s=time_budget_s,
                                stopping=sequential.StoppingRule(1.5, 4))
    ctx = CampaignContext.build(presets.get_preset("tiny-flux-cpu"), design.plan("abba", rounds=4), settings,
                                capabilities.recent_engine_capabilities(), model_path=str(tmp_path / "model"))
    runner = bench_runner.CampaignRunner(ctx, asset_filenames={})
    recorded = json.loads((TEST_FIXTURES / "bench-report" / "example.json").read_text())["cells"]
    for cell, seen in zip(runner.cells, recorded, strict=False):  # the seed PR's two rounds, then two planned
        for key in ("status", "reasons", "perf", "outputs", "wall_s"):
            setattr(cell, key, copy.deepcopy(seen[key]))
    return runner


def test_a_spent_time_budget_ends_the_campaign_at_the_round_boundary(tmp_path):
    unlimited = _runner(tmp_path / "a", None)
    assert unlimited._stop_after(7) is False and unlimited.looks[-1]["stop"] is None  # two more rounds to go
    spent = _runner(tmp_path / "b", 1e-9)
    time.sleep(0.01)
    assert spent._stop_after(7) is True and len(spent.cells) == 8
    assert spent.looks[-1]["stop"] == "budget" and spent.looks[-1]["verdict"] == unlimited.looks[-1]["verdict"]
    doc = spent.report()  # a campaign cut short by its budget still reports (it raised ValueError once)
    assert doc["campaign"]["stopping"]["stopped_because"] == "budget" and len(doc["cells"]) == 8
    assert contract.validation_errors(doc) == []
