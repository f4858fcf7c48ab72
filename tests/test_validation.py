"""One config check before anything starts: types from base.yaml, ranges, cross-field rules; one line each."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli import main
from core.config import ConfigError, load_config
from core.trainer.config_checks import planned_world, validate_config

REPO = Path(__file__).resolve().parent.parent
RECIPES = ["grpo", "rloo", "remax", "dapo", "ppo", "recipes/grpo/drgrpo.yaml", "recipes/grpo/reinforce_pp.yaml",
           *[f"recipes/grpo/{name}.yaml" for name in ("gspo", "cispo", "gpg", "reinforce_pp_baseline", "opo", "grpo_passk")],
           "entropy_cov", "recipes/entropy_cov/kl_cov.yaml"]


def check(*overrides: str, recipe: str = "grpo", world: tuple[int, str] | None = None) -> None:
    validate_config(load_config(recipe, list(overrides)), world)


def train(capsys, *args: str) -> tuple[int, str]:
    """`recipezoo train` in this process: (exit code, stderr)."""
    code = main(["train", "--recipe", "grpo", *args])
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("recipezoo: ") and " — " in lines[0], err
    return lines[0]


# ---- through the command line: one line, exit 2, nothing created --------------------------------
def test_a_word_for_an_integer_names_the_key_the_value_and_the_type(capsys, tmp_path):
    code, err = train(capsys, "data.train_batch_size=abc", f"trainer.output_dir={tmp_path}/out")
    assert code == 2
    assert "data.train_batch_size='abc' is a string — expected an integer" in one_line(err)


def test_rollout_n_of_zero_is_out_of_range(capsys, tmp_path):
    code, err = train(capsys, "rollout.n=0", f"trainer.output_dir={tmp_path}/out")
    assert code == 2
    assert "rollout.n=0 is out of range — expected ≥ 1" in one_line(err)


def test_a_failed_check_creates_no_mlflow_run_and_no_output_dir(capsys, tmp_path):
    store = tmp_path / "mlflow.db"
    code, err = train(capsys, "data.train_batch_size=8", "actor.ppo_mini_batch_size=16",
                      "tracking.backends=[console,mlflow]", f"tracking.uri=sqlite:///{store}",
                      f"trainer.output_dir={tmp_path}/out")
    assert code == 2
    assert "data.train_batch_size=8 must be a multiple of actor.ppo_mini_batch_size=16" in one_line(err)
    assert not store.exists(), "a run that fails its config check must not open the MLflow store"
    assert not (tmp_path / "out").exists()


def test_the_dry_run_runs_the_same_check(capsys):
    code = main(["train", "--recipe", "grpo", "--dry-run", "rollout.n=0"])
    assert code == 2 and "rollout.n=0 is out of range — expected ≥ 1" in capsys.readouterr().err


def test_debug_flag_and_environment_show_the_traceback(monkeypatch):
    with pytest.raises(ConfigError, match="rollout.n=0"):
        main(["train", "--recipe", "grpo", "--debug", "rollout.n=0"])
    monkeypatch.setenv("RECIPEZOO_DEBUG", "1")
    with pytest.raises(ConfigError, match="rollout.n=0"):
        main(["train", "--recipe", "grpo", "rollout.n=0"])


def test_under_torchrun_only_rank_0_prints_and_no_rank_prints_a_traceback(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "core.cli", "train",
         "--recipe", "grpo", "rollout.n=0", f"trainer.output_dir={tmp_path}/out"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "recipezoo: " in line]
    assert len(lines) == 1 and "rollout.n=0 is out of range" in lines[0], result.stderr
    # torchrun's own summary follows (its launcher's stack); no rank prints a stack through our code.
    assert f'File "{REPO}/core/' not in result.stderr and "[rank" not in result.stderr, result.stderr


# ---- the validator ---------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_shipped_recipe_passes_at_its_launch_and_planned_world(recipe):
    config = load_config(recipe)
    validate_config(config)
    validate_config(config, planned_world(config))


@pytest.mark.parametrize("override, message", [
    ("data.train_batch_size=8.0", "data.train_batch_size=8.0 is a float — expected an integer"),
    ("actor.use_kl_loss=yes", "actor.use_kl_loss='yes' is a string — expected true or false"),
    ("actor.lr=fast", "actor.lr='fast' is a string — expected a number"),
    ("actor.betas=0.9", "actor.betas=0.9 is a float — expected a list"),
    ("data.val_max_samples=all", "data.val_max_samples='all' is a string — expected an integer or null"),
])
def test_types_follow_the_base_defaults(override, message):
    with pytest.raises(ConfigError) as info:
        check(override)
    assert message in str(info.value)


def test_values_of_the_same_kind_as_the_default_pass():
    check("actor.lr=1", "data.val_max_samples=null", "tracking.backends=console", "actor.remove_padding=true",
          "data.train_files=[a.parquet,b.parquet]")


@pytest.mark.parametrize("override, expected", [("rollout.top_p=0", "in (0, 1]"), ("actor.lr=0", "> 0"),
                                                ("trainer.save_freq=-1", "≥ 0"), ("algorithm.gamma=1.5", "in [0, 1]")])
def test_ranges(override, expected):
    with pytest.raises(ConfigError) as info:
        check(override)
    assert f"{override} is out of range — expected {expected}" in str(info.value)


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"reward.manager='threads' is not one of \['naive', 'pool'\]"):
        check("reward.manager=threads")
    with pytest.raises(ConfigError, match=r"model.init='randn' is not one of \['pretrained', 'random'\]"):
        check("model.init=randn")
    with pytest.raises(ConfigError, match=r"critic.value_head_init='xavier' is not one of \['normal', 'zeros'\]"):
        check("critic.value_head_init=xavier")


@pytest.mark.parametrize("recipe", ["grpo", "rloo"])
def test_group_advantages_need_two_samples_per_prompt(recipe):
    with pytest.raises(ConfigError, match=r"rollout.n=1 with algorithm.adv_estimator=\w+ — expected rollout.n ≥ 2"):
        check("rollout.n=1", "actor.ppo_mini_batch_size=4", recipe=recipe)


def test_one_sample_per_prompt_is_fine_without_groups():
    check("rollout.n=1", recipe="recipes/grpo/reinforce_pp.yaml")
    check("rollout.n=1", recipe="ppo")


def test_the_batch_must_split_over_torchrun_ranks(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ConfigError, match=r"data.train_batch_size=32 must be divisible by the number of ranks \(3\) "
                                          r"\(torchrun's WORLD_SIZE=3\)"):
        check()


def test_actor_tensor_parallel_size_must_divide_the_world():
    check("actor.tensor_parallel_size=2", world=(4, "test"))
    with pytest.raises(ConfigError, match=r"actor.tensor_parallel_size=3 does not divide the 4 training rank"):
        check("actor.tensor_parallel_size=3", world=(4, "test"))


def test_rollout_tensor_parallel_size_must_divide_the_ranks():
    check("rollout.name=vllm", "rollout.tensor_model_parallel_size=2", world=(4, "test"))
    with pytest.raises(ConfigError, match=r"rollout.tensor_model_parallel_size=2 does not divide the 3 rank"):
        check("rollout.name=vllm", "rollout.tensor_model_parallel_size=2", "data.train_batch_size=48",
              "actor.ppo_mini_batch_size=24", world=(3, "test"))


# ---- placement: rollout engines on devices of their own ---------------------------------------------
DISAGGREGATED = ("trainer.controller=ray", "trainer.placement=disaggregated")


@pytest.mark.parametrize("overrides, message", [
    (["trainer.placement=disaggregated"], "trainer.controller='local' with trainer.placement=disaggregated — "
                                          "rollout workers of their own are Ray actors; set trainer.controller=ray"),
    ([*DISAGGREGATED, "trainer.rollout_workers=0"], "trainer.rollout_workers=0 is out of range — expected ≥ 1"),
    ([*DISAGGREGATED, "rollout.weight_bucket_mb=0"], "rollout.weight_bucket_mb=0 is out of range — expected > 0"),
    ([*DISAGGREGATED, "rollout.name=vllm", "rollout.tensor_model_parallel_size=2"],
     "rollout.tensor_model_parallel_size=2 with trainer.placement=disaggregated — each rollout worker runs a "
     "one-device engine"),
    ([*DISAGGREGATED, "rollout.name=sglang"], "rollout.name='sglang' with trainer.placement=disaggregated — the "
                                              "weight stream loads into hf and vllm engines"),
    ([*DISAGGREGATED, "rollout.name=vllm", "actor.lora.rank=8", "actor.lora.sync=adapter"],
     "actor.lora.sync='adapter' with trainer.placement=disaggregated — an adapter goes to the engine through files"),
    (["trainer.placement=split"], "trainer.placement='split' is not one of ['colocated', 'disaggregated']"),
    ([*DISAGGREGATED, "trainer.schedule=async", "trainer.max_staleness=-1"],
     "trainer.max_staleness=-1 is out of range — expected ≥ 1"),
])
def test_what_cannot_run_disaggregated_is_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        check(*overrides, world=(4, "test"))
    assert message in str(info.value) and len(str(info.value).splitlines()) == 1


def test_remax_runs_disaggregated_on_the_sync_schedule_only():
    check(*DISAGGREGATED, recipe="remax")  # the greedy baseline is generated on the weights just streamed
    with pytest.raises(ConfigError, match="algorithm.adv_estimator='remax' with trainer.schedule=one_step_off — "
                                          "ReMax's greedy baseline must come from the weights being trained"):
        check(*DISAGGREGATED, "trainer.schedule=one_step_off", recipe="remax")


# ---- the zoo's losses -------------------------------------------------------------------------------
@pytest.mark.parametrize("estimator", ["gae", "reinforce_plus_plus", "remax"])
def test_a_sequence_level_loss_refuses_token_level_advantages(estimator):
    with pytest.raises(ConfigError) as info:
        check(f"algorithm.adv_estimator={estimator}", recipe="recipes/grpo/gspo.yaml")
    assert f"actor.policy_loss=gspo with algorithm.adv_estimator={estimator} — expected an estimator" in str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_an_unknown_policy_loss_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"actor.policy_loss='gspoo' is not one of \['cispo', 'clip_cov', 'gpg', 'gspo'"):
        check("actor.policy_loss=gspoo")


@pytest.mark.parametrize("override, expected", [
    ("actor.clip_ratio_low=-0.1", "≥ 0"), ("actor.clip_ratio_high=-0.2", "≥ 0"),
    ("actor.clip_cov_ratio=0", "in (0, 1)"), ("actor.clip_cov_ratio=1.0", "in (0, 1)"),
    ("actor.kl_cov_ratio=1.5", "in (0, 1)"), ("actor.kl_cov_coef=-1", "≥ 0"),
])
def test_zoo_parameters_out_of_range_name_the_key(override, expected):
    with pytest.raises(ConfigError) as info:
        check(override, recipe="entropy_cov")
    assert f"{override} is out of range — expected {expected}" in str(info.value)


def test_clip_cov_bounds_must_be_ordered():
    with pytest.raises(ConfigError, match=r"actor.clip_cov_lb=5.0 with actor.clip_cov_ub=1.0 — expected clip_cov_lb"):
        check("actor.clip_cov_lb=5.0", "actor.clip_cov_ub=1.0", recipe="entropy_cov")


# ---- the engine's per-token log-probs ------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (["algorithm.rollout_correction.mode=tis"],
     "algorithm.rollout_correction.mode='tis' with rollout.calculate_log_probs=false — its importance weights"),
    (["trainer.schedule=async", "trainer.partial_rollout=true"],
     "trainer.partial_rollout=True with rollout.calculate_log_probs=false — a resumed response keeps"),
])
def test_what_reads_rollout_log_probs_needs_them(overrides, message):
    with pytest.raises(ConfigError) as info:
        check("rollout.calculate_log_probs=false", *overrides)
    assert message in str(info.value) and "set rollout.calculate_log_probs=true" in str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_without_rollout_log_probs_the_sync_and_one_step_off_schedules_pass():
    check("rollout.calculate_log_probs=false")
    check("rollout.calculate_log_probs=false", "trainer.schedule=one_step_off")
