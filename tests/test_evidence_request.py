"""collect_pr_evidence without the engine: the request's normalisation and hash, the manifest's schema, and every
refusal a user can meet before anything runs (another request's folder, a foreign folder, an unwritable --out, a
preset this machine cannot run), each with nothing lost."""

from __future__ import annotations

import json

import pytest

from conftest import run_main, run_script
from sgl_diffusion_bench import contract
from sgl_diffusion_bench.evidence import manifest, render, request, verify

TINY = ("--model", "tiny-flux-cpu", "--candidate-args", "--log-level info")


def _request(**changes):
    values = dict(model="tiny-flux-cpu", model_path=None, overrides=[], bcg=False, baseline_args="",
                  candidate_args="--log-level info", threshold_pct=1.5, samples=1, budget_requests=8,
                  model_cache_root=None)
    return request.build(**{**values, **changes})


def test_one_change_spelled_two_ways_hashes_alike_and_a_different_one_is_named():
    one, same = _request(), _request(candidate_args="--log-level   'info'")
    assert one.sha256() == same.sha256()
    other = _request(threshold_pct=2.0, samples=2, budget_requests=16)
    assert request.differing_fields(one.to_json(), other.to_json()) == ["budget_requests", "samples", "threshold_pct"]
    assert one.budget_rounds == 2 and _request(budget_requests=11).budget_requests == 8  # whole rounds only


def test_a_change_that_is_not_one_and_arms_of_different_layouts_are_refused():
    for changes, code in (({"candidate_args": ""}, "evidence.no_change"),
                          ({"candidate_args": "--tp-size 2"}, "evidence.layouts_differ"),
                          ({"bcg": True}, "usage.rejected_combination"),
                          ({"budget_requests": 4}, "usage.bad_budget")):
        try:
            _request(**changes)
        except contract.UsageError as exc:
            assert exc.code == code
        else:
            raise AssertionError(f"{changes} was accepted")


def test_a_new_manifest_validates_and_a_damaged_one_is_refused(tmp_path):
    asked = _request()
    doc = manifest.new_manifest(tmp_path, asked.to_json(), asked.sha256())
    assert contract.validation_errors(doc) == [] and [s["name"] for s in doc["steps"]] == list(manifest.STEPS)
    manifest.save(tmp_path, doc)
    assert manifest.load(tmp_path)["request_sha256"] == asked.sha256()
    (tmp_path / manifest.NAME).write_text(json.dumps({**doc, "state": "half-done"}))
    try:
        manifest.load(tmp_path)
    except contract.InputError as exc:
        assert exc.code == "evidence.manifest_unreadable" and "state" in exc.message
    else:
        raise AssertionError("a manifest with an unknown state was read")


def test_a_folder_of_another_request_is_refused_naming_the_fields_and_left_as_it_was(tmp_path):
    asked = _request()
    manifest.save(tmp_path, manifest.new_manifest(tmp_path, asked.to_json(), asked.sha256()))
    before = (tmp_path / manifest.NAME).read_bytes()
    run = run_main("collect_pr_evidence", "run", "--out", str(tmp_path), *TINY, "--budget-requests", "8",
                     "--threshold", "3", "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "evidence.other_request"
    assert "threshold_pct" in run.document["error"]["message"]
    assert (tmp_path / manifest.NAME).read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        manifest.NAME]


def test_a_foreign_folder_and_an_unwritable_out_are_refused_before_anything_runs(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    run = run_main("collect_pr_evidence", "run", "--out", str(foreign), *TINY, "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "evidence.foreign_folder"
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for out in (blocker, blocker / "below"):
        run = run_main("collect_pr_evidence", "run", "--out", str(out), *TINY, "--json")
        assert run.returncode == 2 and run.document["error"]["code"] == "usage.output_unwritable", run.stdout


@pytest.mark.torch
def test_a_preset_that_cannot_run_here_is_refused_with_exit_3_before_anything_is_written(tmp_path):
    """flux needs a GPU (and gated weights): the readiness check refuses it after probing the engine."""
    gpu_out = tmp_path / "gpu"
    run = run_script("collect_pr_evidence", "run", "--out", str(gpu_out), "--model", "flux", "--bcg", "--json",
                     env={"HF_HUB_OFFLINE": "1"})
    assert run.returncode == 3 and run.document["error"]["code"] == "evidence.not_ready", run.stdout
    assert "gpus" in run.document["error"]["message"] and not gpu_out.exists()


def test_verify_names_a_missing_file_and_one_the_manifest_does_not_record(tmp_path):
    asked = _request()
    doc = manifest.new_manifest(tmp_path, asked.to_json(), asked.sha256())
    (tmp_path / "readiness").mkdir()
    kept = tmp_path / "readiness" / "readiness.json"
    kept.write_text("{}")
    manifest.step(doc, "readiness").update(status="done", files=[manifest.file_record(tmp_path, kept)])
    manifest.step(doc, "campaign")["files"] = [{"path": "campaign/gone.log", "sha256": "0" * 64, "bytes": 3}]
    manifest.save(tmp_path, doc)
    (tmp_path / "stray.txt").write_text("x")
    found = {(f["file"], f["check"]) for f in verify.verify(tmp_path)["findings"]}
    assert {("campaign/gone.log", "missing"), ("stray.txt", "not_recorded"), ("evidence.json", "manifest")} <= found
    run = run_main("collect_pr_evidence", "verify", str(tmp_path), "--json")
    assert run.returncode == 1 and run.document["schema"] == "evidence-verify.v1" and not run.document["ok"]
    missing = run_main("collect_pr_evidence", "verify", str(tmp_path / "nowhere"), "--json")
    assert missing.returncode == 2 and missing.document["error"]["code"] == "evidence.not_a_folder"


def test_a_file_the_manifest_does_not_record_is_never_deleted_by_a_resume(tmp_path):
    asked = request.build(model="tiny-flux-cpu", model_path=None, overrides=[], bcg=False, baseline_args="",
                          candidate_args="--log-level info", threshold_pct=1.5, samples=1, budget_requests=None,
                          model_cache_root=None)
    doc = manifest.new_manifest(tmp_path, asked.to_json(), asked.sha256())
    manifest.step(doc, "readiness")["status"] = "done"  # a finished step's folder: nothing there may be unrecorded
    (tmp_path / "readiness").mkdir()
    mine = tmp_path / "readiness" / "my-notes.txt"
    mine.write_text("keep me")
    manifest.save(tmp_path, doc)
    run = run_main("collect_pr_evidence", "run", "--out", str(tmp_path), *TINY, "--json")
    assert run.returncode == 2 and run.document["error"]["code"] == "evidence.foreign_file"
    assert "readiness/my-notes.txt" in run.document["error"]["message"] and mine.read_text() == "keep me"


def test_recorded_paths_map_into_the_folder_where_it_is_now(tmp_path):
    """A folder first written at /old/ev, resumed at /mid/ev (the manifest's out_dir moved on, the campaign report
    still records /old/ev/campaign), now at tmp_path: both kinds of recorded path land inside tmp_path."""
    doc = {"out_dir": "/mid/ev"}
    camp = {"plan": {"output_dir": "/old/ev/campaign"}}
    dump = "/old/ev/campaign/r1/cell.perf.json"
    assert render.local_path(tmp_path, doc, dump, camp) == tmp_path / "campaign" / "r1" / "cell.perf.json"
    assert render.local_path(tmp_path, doc, "/mid/ev/profile/p.json", camp) == tmp_path / "profile" / "p.json"
    # a path outside the folder (a model cache, say) is left as recorded; a sibling with a longer name is not inside
    assert str(render.local_path(tmp_path, doc, "/elsewhere/x", camp)) == "/elsewhere/x"
    assert str(render.local_path(tmp_path, doc, "/old/ev-other/x.json", camp)) == "/old/ev-other/x.json"
    assert render.local_path(tmp_path, doc, None, camp) is None


def test_flags_both_arms_share_travel_with_bcg_into_every_step_and_leave_older_hashes_alone(tmp_path):
    """--extra-args (e.g. --attention-backend torch_sdpa on a Hopper machine without FA3) is allowed with --bcg and
    reaches the campaign, both profiled requests and the replay's command; without it the request hashes as before."""
    from sgl_diffusion_bench import presets
    from sgl_diffusion_bench.evidence import profiling, steps

    plain = _request()
    assert "common_args" not in plain.to_json()
    assert request.EvidenceRequest.from_json(plain.to_json()).sha256() == plain.sha256()
    shared = _request(bcg=True, candidate_args="", common_args="--attention-backend torch_sdpa")
    assert shared.to_json()["common_args"] == ["--attention-backend", "torch_sdpa"]
    assert request.EvidenceRequest.from_json(shared.to_json()) == shared
    assert request.differing_fields(shared.to_json(), _request(bcg=True, candidate_args="").to_json()) == [
        "common_args"]
    from sgl_diffusion_bench.engine import capabilities

    ctx = steps.Context(root=tmp_path, request=shared, preset=presets.get_preset("tiny-flux-cpu"),
                        caps=capabilities.recent_engine_capabilities())
    assert "--extra-args=--attention-backend torch_sdpa" in steps.campaign_command(ctx)
    assert steps.campaign_runner(ctx).settings.extra_args == ("--attention-backend", "torch_sdpa")
    for arm in profiling.ARMS:
        assert profiling._arm_request(ctx, arm).extra_args[:2] == ("--attention-backend", "torch_sdpa")
    with pytest.raises(contract.UsageError) as refused:
        _request(common_args="--tp-size 2 --x", candidate_args="--tp-size 4")
    assert refused.value.code == "evidence.layouts_differ"


@pytest.mark.torch  # check_readiness.py probes the installed engine, which the fast lane hides
def test_a_model_path_directory_makes_the_model_ready_without_the_hub(tmp_path):
    """On the H200 (offline, FLUX.1-dev given as --model-path) readiness refused the model as 'not cached': the
    directory is the model; one without model_index.json is not ready, and the hub is not asked either way."""
    from sgl_diffusion_bench import presets
    from sgl_diffusion_bench.engine import capabilities
    from sgl_diffusion_bench.campaign import readiness

    preset = presets.get_preset("flux-1gpu")
    caps = capabilities.recent_engine_capabilities()
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    empty = tmp_path / "FLUX.1-dev"
    empty.mkdir()
    assert readiness.assess(preset, caps, offline)["checks"]["model"]["ok"] is False
    missing = readiness.assess(preset, caps, offline, model_path=str(empty))
    assert missing["checks"]["model"]["ok"] is False and "model_index.json" in missing["checks"]["model"]["reason"]
    (empty / "model_index.json").write_text("{}")
    given = readiness.assess(preset, caps, offline, model_path=str(empty))
    assert given["checks"]["model"]["ok"] is True and given["hub"]["checked"] is False
    shown = run_script("check_readiness", "--model", "flux-1gpu", "--model-path", str(empty), "--engine-capabilities",
                       "recent", "--json",
                       env=offline)  # the document validates against readiness.v1 (run_script checks it)
    assert shown.document["checks"]["model"]["ok"] is True


@pytest.mark.parametrize("changes", [
    {}, {"bcg": True, "candidate_args": "", "common_args": "--attention-backend torch_sdpa",
         "model_path": "/models/FLUX.1-dev", "engine_overlap": "off"},
    {"overrides": ["num_inference_steps=2"], "budget_minutes": 5.0}])
def test_the_folders_reproduce_command_asks_for_the_same_request(changes):
    """EVIDENCE.md's "how to reproduce" line, parsed by the CLI itself, must hash as the folder's request (it once
    left out --extra-args, so the H200 seed experiment's line ran without its attention backend)."""
    import shlex

    from sgl_diffusion_bench.cli import evidence as evidence_cli

    asked = _request(**changes)
    argv = shlex.split(render.doc_command({"request": asked.to_json()}))
    assert argv[:3] == ["python3", "scripts/collect_pr_evidence.py", "run"]
    again = evidence_cli.request_of(evidence_cli.build_parser().parse_args(argv[2:]))
    assert again.sha256() == asked.sha256() and again.to_json() == asked.to_json()
