"""Every recipe runs a step on the random tiny model, applies its own formula, and its 8-GPU launcher dry-runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.algos.advantages import group_indices
from core.cli import load_trainer_class
from core.config import load_config
from core.data.rows import write_rows
from core.rollout.base import split_greedy_baselines
from recipes.remax.trainer import ReMaxTrainer

REPO = Path(__file__).resolve().parent.parent
DRGRPO = str(REPO / "recipes" / "grpo" / "drgrpo.yaml")
REINFORCE_PP = str(REPO / "recipes" / "grpo" / "reinforce_pp.yaml")
KL_COV = str(REPO / "recipes" / "entropy_cov" / "kl_cov.yaml")


def varied_score(text, ground_truth):
    """A reward that varies from sample to sample and prompt to prompt, so groups and baselines are not all zero."""
    return sum(map(ord, text + str(ground_truth))) % 4 / 4


def build(recipe, overrides):
    config = load_config(recipe, overrides)
    trainer = load_trainer_class(config.trainer.cls)(config)
    trainer.reward_manager.scorers, trainer.reward_manager.default_scorer = {}, varied_score
    return trainer


def spy_on(obj, name, record_result=False):
    """Record every call of `obj.<name>` (its argument, or its arguments and result), and still call it."""
    calls, original = [], getattr(obj, name)

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        calls.append((*args, result) if record_result else args[0])
        return result

    setattr(obj, name, spy)
    return calls


def returns_to_go(rewards, mask):
    return (rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask  # Σ_{t'≥t} r_t'


# ---- one step of each recipe --------------------------------------------------------------------
@pytest.mark.parametrize("recipe, uses_reference", [
    ("rloo", True), ("remax", True), ("dapo", False), (DRGRPO, True), (REINFORCE_PP, True),
    ("entropy_cov", False),
])
def test_each_recipe_runs_one_step_on_the_random_model(fast_overrides, recipe, uses_reference):
    trainer = build(recipe, fast_overrides)
    updates = spy_on(trainer, "update_policy")
    trainer.fit()
    (batch,) = updates
    rows, width = batch["responses"].shape
    assert rows == 4 * 2
    assert ("ref_log_probs" in batch) is uses_reference
    for key in ("old_log_probs", "token_level_rewards", "advantages"):
        assert batch[key].shape == (rows, width), key
    assert (batch["advantages"] * (1 - batch["response_mask"])).abs().sum() == 0


def test_rloo_advantage_is_the_leave_one_out_difference(fast_overrides):
    trainer = build("rloo", fast_overrides + ["rollout.n=3", "data.max_response_length=12"])
    updates = spy_on(trainer, "update_policy")
    trainer.fit()
    (batch,) = updates
    mask = batch["response_mask"].float()
    rewards = (batch["token_level_rewards"] * mask).sum(-1)  # (B,)
    assert rewards.unique().numel() > 1
    for rows in group_indices(batch["uid"]):
        assert len(rows) == 3
        for i in rows:
            others = [rewards[j] for j in rows if j != i]
            expected = rewards[i] - sum(others) / len(others)
            torch.testing.assert_close(batch["advantages"][i], expected * mask[i])


# ---- ReMax --------------------------------------------------------------------------------------
def test_remax_baselines_are_the_greedy_rewards_and_advantages_subtract_them(fast_overrides):
    trainer = build("remax", fast_overrides + ["data.max_response_length=12"])
    rollouts = spy_on(trainer.actor_rollout, "generate", record_result=True)  # (prompts, params, rollout)
    updates = spy_on(trainer, "update_policy")
    logged = spy_on(trainer.tracking, "log_metrics")
    trainer.fit()
    (batch,) = updates

    # One rollout call returns both: the samples, then one greedy completion per prompt (marked).
    ((_, params, rollout),) = rollouts
    assert params.greedy_baseline and params.n == 2 and not params.greedy
    sampled, greedy = split_greedy_baselines(rollout)
    assert len(sampled) == 4 * 2 and sorted(greedy["uid"]) == sorted(set(batch["uid"]))  # one greedy per prompt
    greedy_reward = dict(zip(greedy["uid"], trainer.reward_manager(greedy)[0].sum(-1).tolist()))
    assert len(batch) == 4 * 2  # the n sampled responses only; the greedy ones are not trained on
    assert batch["baselines"].shape == (len(batch),) and batch["baselines"].dtype == torch.float32
    assert batch["baselines"].tolist() == pytest.approx([greedy_reward[uid] for uid in batch["uid"]])
    assert len(set(greedy_reward.values())) > 1, "the scorer should give the greedy responses different rewards"

    mask = batch["response_mask"].float()
    expected = (returns_to_go(batch["token_level_rewards"], mask) - batch["baselines"][:, None]) * mask
    torch.testing.assert_close(batch["advantages"], expected)
    step_metrics = logged[-1]
    assert step_metrics["critic/baseline/mean"] == pytest.approx(batch["baselines"].mean().item())
    # The greedy tokens are generated too: counted apart from the trained ones (the generation stage's speed).
    assert step_metrics["rollout/baseline_tokens"] == greedy["response_mask"].sum().item() > 0
    assert step_metrics["rollout/generated_tokens"] == batch["response_mask"].sum().item()


def test_remax_trainer_refuses_another_estimator(fast_overrides):
    with pytest.raises(ValueError, match="algorithm.adv_estimator=remax"):
        ReMaxTrainer(load_config("remax", fast_overrides + ["algorithm.adv_estimator=grpo"]))


# ---- Clip-Cov / KL-Cov -----------------------------------------------------------------------------
def test_kl_cov_trainer_picks_the_top_covariance_tokens_once_over_the_step_batch(fast_overrides):
    trainer = build(KL_COV, fast_overrides + ["actor.kl_cov_ratio=0.1", "actor.ppo_mini_batch_size=4"])
    updates = spy_on(trainer, "update_policy")
    trainer.fit()
    (batch,) = updates
    assert "old_log_probs" in batch  # computed although the step is one optimizer step: the pick needs it
    mask = batch["response_mask"].bool()
    selected = batch["cov_selected"]
    assert selected.sum() == max(int(0.1 * mask.sum()), 1) and not (selected & ~mask).any()
    # The picked tokens are those of largest (A − Ā)(log π_old − mean) over the whole batch, not per mini-batch.
    adv, logp = batch["advantages"][mask], batch["old_log_probs"][mask]
    cov = (adv - adv.mean()) * (logp - logp.mean())
    assert cov[selected[mask]].min() >= cov[~selected[mask]].max()


# ---- the GRPO config variants -------------------------------------------------------------------
def test_drgrpo_is_grpo_without_std_and_with_a_constant_normaliser():
    grpo, cfg = load_config("grpo"), load_config(DRGRPO)
    assert cfg.algorithm.norm_adv_by_std_in_grpo is False
    assert cfg.actor.loss_agg_mode == "seq-mean-token-sum-norm"
    assert (cfg.tracking.run_name, cfg.tracking.tags.recipe) == ("drgrpo", "drgrpo")
    # Everything else is GRPO's recipe, inherited from recipes/grpo/config.yaml.
    assert cfg.trainer.cls == grpo.trainer.cls and cfg.rollout.n == grpo.rollout.n
    assert cfg.actor.use_kl_loss is True and cfg.algorithm.adv_estimator == "grpo"


def test_reinforce_pp_puts_the_kl_in_the_reward_and_needs_no_groups():
    cfg = load_config(REINFORCE_PP)
    assert cfg.algorithm.adv_estimator == "reinforce_plus_plus"
    assert cfg.algorithm.use_kl_in_reward is True and cfg.actor.use_kl_loss is False
    assert (cfg.algorithm.kl_penalty, cfg.algorithm.kl_coef) == ("k1", 0.001)
    assert (cfg.tracking.run_name, cfg.tracking.tags.recipe) == ("reinforce_pp", "reinforce_pp")
    assert cfg.trainer.cls == "core.trainer.base.BaseTrainer"


def test_recipe_configs_name_their_trainer_and_tag():
    for recipe, cls in [("rloo", "RLOOTrainer"), ("remax", "ReMaxTrainer"), ("dapo", "DAPOTrainer")]:
        cfg = load_config(recipe)
        assert cfg.trainer.cls == f"recipes.{recipe}.trainer.{cls}"
        assert (cfg.tracking.run_name, cfg.tracking.tags.recipe) == (recipe, recipe)
        assert cfg.data.train_batch_size * cfg.rollout.n == 256  # the tiny budget of sequences per step


# ---- the 8-GPU launchers, checked offline -------------------------------------------------------
def gsm8k_rows(n: int = 4) -> list[dict]:
    return [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"What is {i} + 2?"}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(i + 2)},
             "extra_info": {"split": "train", "index": i}} for i in range(n)]


@pytest.mark.parametrize("recipe, expected", [
    ("rloo", ["rollout      vllm: n=5", "prompts/step              1024", "in the reward k1 × 0.001"]),
    ("remax", ["rollout      vllm: n=4", "prompts/step              512", "in the reward k1 × 0.001"]),
    ("dapo", ["rollout      vllm: n=16", "prompts/step              512", "KL           off",
              "clip 0.2/0.28, dual-clip c 10.0", "loss agg token-mean"]),
])
def test_run_qwen3_8b_dry_run_of_each_recipe(tmp_path, recipe, expected):
    data = tmp_path / "gsm8k"
    write_rows(gsm8k_rows(), data / "train.parquet")
    write_rows(gsm8k_rows(), data / "test.parquet")
    env = dict(os.environ, DATA=str(data), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               RECIPEZOO_CACHE=str(tmp_path / "cache"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    script = REPO / "recipes" / recipe / "run_qwen3_8b.sh"
    result = subprocess.run(["bash", str(script), "--dry-run"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    plan = result.stdout
    assert "model        Qwen/Qwen3-8B" in plan and "1 node × 8 GPUs = 8 GPUs" in plan
    assert f"recipes.{recipe}.trainer." in plan
    for line in expected:
        assert line in plan, line


def test_run_qwen3_8b_gspo_dry_run(tmp_path):
    data = tmp_path / "gsm8k"
    write_rows(gsm8k_rows(), data / "train.parquet")
    write_rows(gsm8k_rows(), data / "test.parquet")
    env = dict(os.environ, DATA=str(data), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               RECIPEZOO_CACHE=str(tmp_path / "cache"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    script = REPO / "recipes" / "grpo" / "run_qwen3_8b_gspo.sh"
    result = subprocess.run(["bash", str(script), "--dry-run"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    plan = result.stdout
    assert "model        Qwen/Qwen3-8B" in plan and "1 node × 8 GPUs = 8 GPUs" in plan
    assert "rollout      vllm: n=5" in plan and "prompts/step              1024" in plan
    for line in ["policy loss gspo (clip 0.0003/0.0004", "loss agg seq-mean-token-mean", "KL           off"]:
        assert line in plan, line


def test_run_qwen3_8b_cispo_is_the_grpo_launcher_with_its_own_recipe():
    # The dry run above checks the shared launcher through GSPO's wrapper; CISPO's differs only in its names.
    def launch(variant):
        return (REPO / "recipes" / "grpo" / f"run_qwen3_8b_{variant}.sh").read_text().splitlines()[-1]

    assert launch("cispo") == launch("gspo").replace("gspo", "cispo")
    assert launch("cispo").startswith("exec env RECIPE=recipes/grpo/cispo.yaml RUN_NAME=cispo-qwen3-8b bash")
