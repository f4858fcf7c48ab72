"""The verl side-by-side bench on CPU: the report's table from synthetic runs (made up here, never results),
verl's metric log parsed, and bench/verl/grpo_gpu.py's overrides composed against verl's real Hydra config
(skipped where verl is not installed: it lives in its own environment, bench/requirements-verl.txt)."""

import importlib.util
import json
from pathlib import Path

import pytest

from bench.common.suite_calls import record  # noqa: E402
from bench.verl.grpo_gpu import SHAPES, WITHOUT_FLASH_ATTN, compose, packing_on, read_steps, token_budgets, verl_overrides  # noqa: E402
from bench.verl.report import verl_section, write_verl_plot  # noqa: E402

needs_verl = pytest.mark.skipif(importlib.util.find_spec("verl") is None or importlib.util.find_spec("hydra") is None,
                                reason="verl is installed in its own environment (bench/requirements-verl.txt)")


def step(n, gen, old, update, sync, total, throughput, sync_key="sync_weights", reward=0.0):
    return {"step": n, "timing_s/gen": gen, "timing_s/reward": reward, "timing_s/old_log_prob": old,
            "timing_s/update_actor": update, f"timing_s/{sync_key}": sync, "timing_s/step": total,
            "perf/throughput": throughput}


def write(directory: Path, name: str, report: dict) -> None:
    (directory / name).write_text(json.dumps(report))


@pytest.fixture
def synthetic_runs(tmp_path):
    """Synthetic runs of every kind the suite writes; step 1 of each is a slow warm-up the medians leave out."""
    write(tmp_path, "e2e_ours.json", {"device": "GPU-X", "command": "ours-cmd", "peak_memory_gib": [40.0],
                                      "versions": {"vllm": "0.26.0"}, "steps": [
        step(1, 10, 0, 30, 1, 45, 3000), step(2, 6, 0, 2.5, 0.4, 9.5, 15000), step(3, 7, 0, 2.5, 0.4, 10.5, 14000)]})
    write(tmp_path, "e2e_ours_vllm024.json", {"device": "GPU-X", "command": "ours024-cmd", "peak_memory_gib": [41.0],
                                              "versions": {"vllm": "0.24.0"}, "steps": [
        step(1, 10, 0, 30, 1, 45, 3000), step(2, 7, 0, 4.5, 0.4, 12.0, 12000), step(3, 7, 0, 4.5, 0.4, 12.0, 12000)]})
    verl_steps = [step(1, 12, 5, 6, 2, 30, 5000, "update_weights"), step(2, 7, 3, 3, 0.5, 14.0, 10500, "update_weights"),
                  step(3, 7, 3, 3, 0.5, 14.0, 10500, "update_weights")]
    config = {"actor_rollout_ref": {"actor": {"use_dynamic_bsz": True}, "model": {"use_remove_padding": True}}}
    write(tmp_path, "e2e_verl.json", {"device": "GPU-X", "command": "verl-cmd", "returncode": 0, "config": config,
                                      "versions": {"verl": "0.9.1", "vllm": "0.24.0"}, "peak_memory_gib": [50.5],
                                      "steps": verl_steps})
    write(tmp_path, "e2e_trl.json", {"device": "GPU-X", "command": "trl-cmd", "versions": {"trl": "1.16.0"},
                                     "steps": [{"step_s": 19.0}], "summary": {
        "median_step_s": 20.0, "tokens_per_s_per_gpu": 7000, "steps_summarized": [2, 3], "median_breakdown_s": {
            "gen": 10.0, "reward": 0.0, "old_log_prob_and_rest": 4.0, "update_actor": 5.5, "sync_weights": 0.5}}})
    scale_steps = {"2": step(2, 30, 4, 20, 1, 60, 2000), "1": step(1, 80, 4, 40, 5, 140, 800),
                   "3": step(3, 30, 4, 20, 1, 60, 2000)}
    write(tmp_path, "dapo8b_ours.json", {"device": "GPU-X", "command": "scale-cmd", "peak_memory_gib": [70.0, 71.0],
                                         "steps": scale_steps})
    write(tmp_path, "dapo8b_verl.json", {"device": "GPU-X", "command": "verl-dapo-cmd", "returncode": 1, "config": {},
                                         "peak_memory_gib": [139.5, 139.6], "steps": [],
                                         "error": "Traceback\ntorch.OutOfMemoryError: CUDA out of memory"})
    return tmp_path


def test_table_puts_each_run_in_its_column_with_medians_after_the_warm_up_step(synthetic_runs):
    text = "\n".join(verl_section(synthetic_runs))
    assert "| stage (s) | ours (vLLM 0.26.0) | ours (vLLM 0.24.0) | verl 0.9.1 (vLLM 0.24.0) | TRL 1.16.0 |" in text
    # ours: median step of 9.5 and 10.5; verl's update_weights is the sync row; TRL's rest of _prepare_inputs is
    # its old_log_prob.
    assert "| **step** | **10.00** | **12.00** | **14.00** | **20.00** |" in text
    assert "| sync_weights | 0.40 | 0.40 | 0.50 | 0.50 |" in text
    assert "| old_log_prob | 0.00 | 0.00 | 3.00 | 4.00 |" in text
    # other = step - stages, per step, then the median: ours 9.5-8.9 = 0.6 and 10.5-9.9 = 0.6; verl 14-13.5 = 0.5.
    assert "| other | 0.60 | 0.10 | 0.50 | 0.00 |" in text
    assert "| tokens/s/GPU | 14,500 | 12,000 | 10,500 | 7,000 |" in text
    assert "| peak GPU memory (GiB) | 40.0 | 41.0 | 50.5 | not recorded |" in text
    assert "| first step (not in the medians) | 45.00 | 45.00 | 30.00 | 19.00 |" in text


def test_verdicts_give_the_speedup_over_each_of_ours_and_the_stages_where_ours_is_slower(synthetic_runs):
    text = "\n".join(verl_section(synthetic_runs))
    assert "verl step / ours (vLLM 0.26.0) step: **1.40×** (target ≥ 1.25×: met)" in text
    assert "verl step / ours (vLLM 0.24.0) step: **1.17×** (target ≥ 1.25×: missed by 0.08×)" in text
    assert "ours (vLLM 0.24.0) is slower than verl at: update_actor by 1.50 s" in text
    assert "ours (vLLM 0.26.0) is slower than verl at: other by 0.10 s" in text


def test_a_failed_verl_run_shows_its_error_and_ours_still_has_its_column(synthetic_runs):
    text = "\n".join(verl_section(synthetic_runs))
    dapo = text[text.index("One DAPO step"):]
    assert "| stage (s) | ours | verl |" in dapo
    assert "| **step** | **60.00** | — |" in dapo  # bench/scale/suite.py's {"<step>": metrics}, sorted by step
    assert "| peak GPU memory (GiB) | 71.0 | 139.6 |" in dapo
    assert "verl (dapo8b_verl.json) did not finish: `exit 1: Traceback / torch.OutOfMemoryError: CUDA out of memory`" in dapo


def test_a_verl_run_stopped_after_its_first_step_is_compared_on_first_steps_only(synthetic_runs):
    write(synthetic_runs, "dapo8b_verl.json", {"device": "GPU-X", "command": "verl-dapo-cmd", "returncode": "timeout",
                                               "wall_s": 537.2, "config": {}, "peak_memory_gib": [118.6],
                                               "steps": [step(1, 28, 31, 104, 1.5, 175, 1400, "update_weights")]})
    text = "\n".join(verl_section(synthetic_runs))
    dapo = text[text.index("One DAPO step"):]
    assert "| **step** | **60.00** | — |" in dapo  # no steps after the first: no medians, no target verdict
    assert "target ≥" not in dapo
    # first steps: ours 140 s (80 + 4 + 40 + 5, other 11), verl 175 s (28 + 31 + 104 + 1.5, other 10.5)
    assert "| update_actor | 40.00 | 104.00 |" in dapo and "| other | 11.00 | 10.50 |" in dapo
    assert "verl finished only its first step (exit timeout after 1 step(s), 537 s in all)" in dapo
    assert "verl first step / ours first step: **1.25×**" in dapo
    assert "ours is slower than verl at: gen by 52.00 s, sync_weights by 3.50 s, other by 0.50 s" in dapo
    assert "verl (dapo8b_verl.json) stopped before its last step: exit timeout after 1 step(s)" in dapo


def test_a_column_from_another_machine_is_left_out_with_a_note(synthetic_runs):
    trl = json.loads((synthetic_runs / "e2e_trl.json").read_text())
    write(synthetic_runs, "e2e_trl.json", trl | {"device": "GPU-Y"})
    text = "\n".join(verl_section(synthetic_runs))
    grpo = text[:text.index("One DAPO step")]
    assert "| stage (s) | ours (vLLM 0.26.0) | ours (vLLM 0.24.0) | verl 0.9.1 (vLLM 0.24.0) |" in grpo
    assert "TRL 1.16.0 (e2e_trl.json) left out: it ran on GPU-Y, not in verl's call" in grpo


def test_speed_settings_are_read_back_from_the_config_verl_recorded(synthetic_runs):
    text = "\n".join(verl_section(synthetic_runs))
    assert "`model.use_remove_padding=True`, `actor.use_dynamic_bsz=True`" in text


def test_a_verl_run_without_flash_attn_qualifies_the_verdict_and_gives_its_mfu(synthetic_runs):
    report = json.loads((synthetic_runs / "e2e_verl.json").read_text())
    for n, metrics in enumerate(report["steps"]):
        metrics["perf/mfu/actor"] = (0.5, 0.02, 0.04)[n]  # step 1 (0.5) is left out of the median
    report["versions"]["flash-attn"] = None
    report["config"]["actor_rollout_ref"]["model"]["use_remove_padding"] = False  # as verl_grpo_gpu.py records it
    write(synthetic_runs, "e2e_verl.json", report)
    grpo = "\n".join(verl_section(synthetic_runs)).split("One DAPO step")[0]
    assert "**1.40×** (target ≥ 1.25×: met, against verl without sequence packing)" in grpo
    assert "verl ran without sequence packing (no flash-attn" in grpo and "`perf/mfu/actor`: 3.0%" in grpo


def test_a_verl_run_with_flash_attn_has_no_padding_note(synthetic_runs):
    report = json.loads((synthetic_runs / "e2e_verl.json").read_text())
    write(synthetic_runs, "e2e_verl.json", report | {"versions": report["versions"] | {"flash-attn": "2.8.3"}})
    text = "\n".join(verl_section(synthetic_runs))
    assert "without flash-attn" not in text and "without sequence packing" not in text


def test_the_plot_has_a_panel_per_shape_with_a_verl_run_that_finished(synthetic_runs):
    assert write_verl_plot(synthetic_runs) == ["verl_side_by_side.png"]  # the DAPO verl run failed: GRPO alone
    assert (synthetic_runs / "verl_side_by_side.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("e2e_verl.json", "dapo8b_verl.json"):
        (synthetic_runs / name).unlink()
    (synthetic_runs / "verl_side_by_side.png").unlink()
    assert write_verl_plot(synthetic_runs) == [] and not (synthetic_runs / "verl_side_by_side.png").exists()


def test_no_verl_run_no_section(synthetic_runs):
    for name in ("e2e_verl.json", "dapo8b_verl.json"):
        (synthetic_runs / name).unlink()
    assert verl_section(synthetic_runs) == []  # results/perf/README.md regenerates as before


def test_verl_metric_log_keeps_timed_steps_and_numbers(tmp_path):
    log = tmp_path / "verl_metrics.jsonl"
    log.write_text("\n".join(json.dumps(line) for line in [
        {"step": 0, "data": {"val-core/acc": 0.1}},  # a validation record: no step time
        {"step": 1, "data": {"timing_s/step": 3.0, "timing_s/gen": 2.0, "perf/throughput": 10.0,
                             "perf/max_memory_allocated_gb": 5.0, "actor/pg_loss": 0.3, "training/global_step": 1,
                             "timing_s/note": "text"}},
    ]))
    assert read_steps(log) == [{"step": 1, "timing_s/step": 3.0, "timing_s/gen": 2.0, "perf/throughput": 10.0,
                                "perf/max_memory_allocated_gb": 5.0, "training/global_step": 1}]
    assert read_steps(tmp_path / "missing.jsonl") == []  # verl died before its first step


def composed(shape: str, tmp_path: Path, extra=()) -> dict:
    return compose(verl_overrides(shape, "/models/m", "/data/train.parquet", 4, tmp_path, list(extra)))


@needs_verl
def test_grpo_overrides_compose_to_our_e2e_step(tmp_path):
    config = composed("grpo", tmp_path)
    data, actor, rollout = config["data"], config["actor_rollout_ref"]["actor"], config["actor_rollout_ref"]["rollout"]
    assert (data["train_batch_size"], rollout["n"], data["max_prompt_length"], data["max_response_length"]) == \
        (32, 8, 384, 512)
    assert actor["ppo_mini_batch_size"] == data["train_batch_size"] and actor["ppo_epochs"] == 1  # one optimizer step
    assert (actor["optim"]["lr"], actor["optim"]["weight_decay"], actor["optim"]["clip_grad"]) == (1e-6, 0.0, 1.0)
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"], actor["clip_ratio_c"]) == (0.2, 0.2, 3.0)
    assert actor["loss_agg_mode"] == "token-mean" and actor["entropy_coeff"] == 0
    assert not actor["use_kl_loss"] and not config["algorithm"]["use_kl_in_reward"]
    assert config["algorithm"]["adv_estimator"] == "grpo" and config["algorithm"]["norm_adv_by_std_in_grpo"]
    assert (rollout["temperature"], rollout["top_p"], rollout["gpu_memory_utilization"]) == (1.0, 1.0, 0.4)
    assert not config["actor_rollout_ref"]["model"]["enable_gradient_checkpointing"]
    assert config["trainer"]["n_gpus_per_node"] == 1 and "file" in config["trainer"]["logger"]


@needs_verl
@pytest.mark.parametrize("shape", ["grpo", "dapo8b"])
def test_speed_settings_compose_on_for_every_shape(shape, tmp_path):
    config = composed(shape, tmp_path)
    actor, rollout = config["actor_rollout_ref"]["actor"], config["actor_rollout_ref"]["rollout"]
    assert actor["use_remove_padding"] and config["actor_rollout_ref"]["model"]["use_remove_padding"]
    assert actor["use_dynamic_bsz"] and rollout["log_prob_use_dynamic_bsz"]  # the log-prob pass inherits it
    assert (actor["ppo_max_token_len_per_gpu"], rollout["log_prob_max_token_len_per_gpu"]) == (16384, 32768)
    assert not rollout["enforce_eager"] and rollout["free_cache_engine"]  # CUDA graphs; memory back to training
    assert actor["strategy"] == "fsdp2" and rollout["name"] == "vllm" and rollout["tensor_model_parallel_size"] == 1


@needs_verl
def test_dapo8b_overrides_compose_to_the_scale_suites_dapo_step(tmp_path):
    config = composed("dapo8b", tmp_path)
    data, actor, rollout = config["data"], config["actor_rollout_ref"]["actor"], config["actor_rollout_ref"]["rollout"]
    assert (data["train_batch_size"], rollout["n"], data["max_prompt_length"], data["max_response_length"]) == \
        (16, 16, 512, 2048)
    assert data["train_batch_size"] // actor["ppo_mini_batch_size"] == 2  # two optimizer steps, as scale_suite.py
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"], actor["clip_ratio_c"]) == (0.2, 0.28, 10.0)
    assert actor["loss_agg_mode"] == "token-mean" and not actor["use_kl_loss"]
    assert config["algorithm"]["filter_groups"]["enable"] and config["reward"]["reward_manager"]["name"] == "dapo"
    assert config["reward"]["reward_kwargs"] == {"overlong_buffer_cfg": {
        "enable": True, "len": 512, "penalty_factor": 1.0, "log": False}, "max_resp_len": 2048}
    assert Path(config["reward"]["custom_reward_function"]["path"]).is_file()  # bench/common/varied_reward.py
    assert config["actor_rollout_ref"]["model"]["enable_gradient_checkpointing"]
    assert config["trainer"]["n_gpus_per_node"] == 2 and rollout["gpu_memory_utilization"] == 0.35


@needs_verl
def test_extra_overrides_win_over_the_bench_defaults(tmp_path):
    config = composed("grpo", tmp_path, ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192"])
    assert config["actor_rollout_ref"]["actor"]["ppo_max_token_len_per_gpu"] == 8192


@needs_verl
def test_without_flash_attn_verl_runs_padded_with_sdpa(tmp_path):
    model = composed("grpo", tmp_path, WITHOUT_FLASH_ATTN)["actor_rollout_ref"]["model"]
    assert model["use_remove_padding"] is False and model["override_config"]["attn_implementation"] == "sdpa"


@needs_verl
@pytest.mark.parametrize("shape", ["grpo", "dapo8b"])
def test_verl_accepts_the_composed_config(shape, tmp_path):
    """verl's own check that main_ppo runs first (needs verl's dependencies, torch among them, importable)."""
    config_module = pytest.importorskip("verl.utils.config")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    config = OmegaConf.create(composed(shape, tmp_path))
    assert not need_reference_policy(config) and not need_critic(config)  # no KL, no value model: actor only
    config_module.validate_config(config, use_reference_policy=False, use_critic=False)
    actor = config_module.omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    assert actor.engine.strategy == "fsdp2"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_token_budgets_meet_verls_floor_and_give_the_log_prob_pass_twice_the_update(shape):
    # verl's performance tuning guide: ppo_max_token_len_per_gpu >= 2 × (max prompt + max response length).
    update, log_prob = (int(o.split("=")[1]) for o in token_budgets(shape))
    lengths = {o.split("=")[0]: int(o.split("=")[1]) for o in SHAPES[shape]["overrides"] if o.startswith("data.max_")}
    assert update >= 2 * (lengths["data.max_prompt_length"] + lengths["data.max_response_length"])
    assert log_prob == 2 * update


def test_packing_follows_flash_attn_unless_forced(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no flash-attn
    assert not packing_on("auto") and not packing_on("off")
    with pytest.raises(SystemExit, match="build_flash_attn.sh"):
        packing_on("on")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert packing_on("auto") and packing_on("on") and not packing_on("off")  # off: the padded run on purpose


def test_a_verl_run_padded_on_purpose_with_flash_attn_installed_is_still_reported_padded(synthetic_runs):
    report = json.loads((synthetic_runs / "e2e_verl.json").read_text())
    report["versions"]["flash-attn"] = "2.8.3"
    report["config"]["actor_rollout_ref"]["model"]["use_remove_padding"] = False  # --packing off
    write(synthetic_runs, "e2e_verl.json", report)
    assert "against verl without sequence packing" in "\n".join(verl_section(synthetic_runs))


def test_each_shape_shows_its_numerics_beside_verl_or_why_they_are_missing(synthetic_runs):
    write(synthetic_runs, "grpo_numerics.json", {
        "rows": 256, "response_tokens": 98304, "verl_log_probs": "verl_log_probs.pt",
        "max_abs_diff": {"old_log_probs": 0.0625, "advantages": 4.7e-7, "pg_loss": 0.0, "pg_loss_perturbed": 1.2e-8,
                         "ours_vs_rollout_log_probs": 0.5}})
    write(synthetic_runs, "dapo8b_numerics.json", {"error": "Traceback\ntorch.OutOfMemoryError: CUDA out of memory"})
    text = "\n".join(verl_section(synthetic_runs))
    grpo, dapo8b = text.split("### One DAPO step")
    assert ("- Numerics beside verl on ours' step-2 rollout (256 responses, 98,304 response tokens), the largest "
            "|ours − verl|: old log-probs 6.2e-02, advantages 4.7e-07, loss at ratio 1 0.0e+00, loss at the perturbed "
            "ratios 1.2e-08 (`grpo_numerics.json`).") in grpo
    assert "ours_vs_rollout" not in text  # context for the json's reader, not a difference between frameworks
    assert ("- Numerics beside verl (`dapo8b_numerics.json`) not measured: `Traceback / torch.OutOfMemoryError: CUDA "
            "out of memory`") in dapo8b


def test_no_numerics_file_no_numerics_line(synthetic_runs):
    assert "Numerics" not in "\n".join(verl_section(synthetic_runs))


def test_a_column_another_call_left_behind_is_left_out_by_calls_json(synthetic_runs):
    """Same GPU model, so only calls.json tells that TRL's file is from an earlier call than verl's."""
    record(synthetic_runs, "20261129T0937Z-a", ["e2e_ours.json", "e2e_ours_vllm024.json", "e2e_verl.json"])
    text = "\n".join(verl_section(synthetic_runs))
    grpo = text[:text.index("One DAPO step")]
    assert "| stage (s) | ours (vLLM 0.26.0) | ours (vLLM 0.24.0) | verl 0.9.1 (vLLM 0.24.0) |" in grpo
    assert "TRL 1.16.0 (e2e_trl.json) left out: it ran in another call (calls.json), not in verl's call" in grpo
    assert "(dapo8b_ours.json) left out" not in text  # neither dapo8b file is recorded: compared by device, as before
    record(synthetic_runs, "20261129T0937Z-a", ["e2e_trl.json"])
    assert "(e2e_trl.json) left out" not in "\n".join(verl_section(synthetic_runs))


def test_the_numerics_line_says_what_the_advantages_and_losses_compared(synthetic_runs):
    numerics = {"rows": 4, "response_tokens": 8, "verl_log_probs": "v.pt",
                "max_abs_diff": {"old_log_probs": 0.04, "advantages": 0.0, "pg_loss": 0.0, "pg_loss_perturbed": 0.0},
                "pg_loss": {"ours": 0.0, "verl": 0.0}}
    write(synthetic_runs, "grpo_numerics.json", numerics)  # written before the rewards field: zeros in both
    assert "advantages and losses were 0 in both" in "\n".join(verl_section(synthetic_runs))
    write(synthetic_runs, "grpo_numerics.json", numerics | {"rewards": "synthetic"})
    assert "on synthetic rewards that vary within groups" in "\n".join(verl_section(synthetic_runs))
    write(synthetic_runs, "grpo_numerics.json", numerics | {"rewards": "the rollout's"})
    text = "\n".join(verl_section(synthetic_runs))
    assert "synthetic" not in text and "were 0 in both" not in text


def test_the_flash_attn_check_the_suite_kept_is_quoted_before_the_tables(synthetic_runs):
    (synthetic_runs / "flash_attn_check.txt").write_text("flash-attn 2.8.3, torch 2.11, GPU-X: causal bf16 varlen\n"
                                                        "  out: ok\nflash_attn_check: pass\n")
    text = "\n".join(verl_section(synthetic_runs))
    assert ("flash-attn's GPU check before verl's run (`flash_attn_check.txt`): pass; flash-attn 2.8.3, "
            "torch 2.11, GPU-X: causal bf16 varlen") in text
    assert text.index("flash_attn_check.txt") < text.index("### One GRPO step")
    (synthetic_runs / "flash_attn_check.txt").write_text("flash-attn 2.8.3, torch 2.11, GPU-X\nTraceback\n")
    assert "(`flash_attn_check.txt`): no verdict (the check did not finish)" in "\n".join(verl_section(synthetic_runs))


def test_start_and_shutdown_are_the_wall_time_the_steps_leave(synthetic_runs):
    verl = json.loads((synthetic_runs / "e2e_verl.json").read_text())
    write(synthetic_runs, "e2e_verl.json", verl | {"wall_s": 100.0})  # steps of 30 + 14 + 14 s
    text = "\n".join(verl_section(synthetic_runs))
    grpo = text[:text.index("One DAPO step")]
    assert "| start + shutdown (wall − steps) | not recorded | not recorded | 42 | not recorded |" in grpo
