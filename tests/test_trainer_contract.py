"""The fit loop end to end on a random model: stages run in order and the contract names culprits."""

import textwrap

import pytest
import torch

from core.algos.actor_loss import OLD_FROM_UPDATE
from core.batch import Batch, BatchContractError
from core.cli import load_trainer_class
from core.config import ConfigError, load_config
from core.trainer.config_checks import validate_config
from recipes.grpo.trainer import GRPOTrainer


def _one_update_run(overrides):
    """Fit, keeping the batch and metrics of the (last) update_policy call."""
    trainer = GRPOTrainer(load_config("grpo", overrides))
    seen = {}
    original = trainer.update_policy

    def spy(batch):
        seen["batch"] = batch
        seen["metrics"] = original(batch)
        return seen["metrics"]

    trainer.update_policy = spy
    trainer.fit()
    return trainer, seen


def test_one_grpo_step_produces_the_contracted_batch(fast_overrides):
    _, seen = _one_update_run(fast_overrides)
    batch = seen["batch"]
    rows, width = batch["responses"].shape
    assert rows == 4 * 2
    for key in ("old_log_probs", "ref_log_probs", "token_level_scores", "advantages"):
        assert batch[key].shape == (rows, width), key
    assert (batch["advantages"] * (1 - batch["response_mask"])).abs().sum() == 0


def test_a_stage_returning_a_misshapen_batch_is_named_in_the_error(fast_overrides):
    class BrokenAdvantages(GRPOTrainer):
        def compute_advantages(self, batch):
            batch = super().compute_advantages(batch)
            batch.tensors["advantages"] = batch["advantages"][:, :-1]
            return batch

    trainer = BrokenAdvantages(load_config("grpo", fast_overrides))
    with pytest.raises(BatchContractError) as error:
        trainer.fit()
    message = str(error.value)
    assert "[adv]" in message and "'advantages'" in message
    assert "expected shape" in message and "got" in message


def test_a_recipe_defined_in_a_users_file_runs(fast_overrides, tmp_path):
    recipe = tmp_path / "my_recipe.py"
    recipe.write_text(textwrap.dedent("""
        from recipes.grpo.trainer import GRPOTrainer

        class LengthPenaltyGRPO(GRPOTrainer):
            calls = 0

            def compute_rewards(self, batch):
                batch = super().compute_rewards(batch)
                type(self).calls += 1
                # Each response token costs 0.01 of reward.
                batch.tensors["token_level_scores"] = batch["token_level_scores"] - 0.01 * batch["response_mask"]
                return batch
    """))
    trainer_cls = load_trainer_class(f"{recipe}:LengthPenaltyGRPO")
    trainer = trainer_cls(load_config("grpo", fast_overrides))
    trainer.fit()
    assert trainer_cls.calls == 1


def test_grpo_rejects_groups_of_one(fast_overrides):
    trainer = GRPOTrainer(load_config("grpo", fast_overrides + ["rollout.n=1", "actor.ppo_mini_batch_size=4"]))
    with pytest.raises(ValueError, match="rollout.n >= 2"):
        trainer.fit()


def test_a_single_update_step_skips_the_old_policy_forward_and_trains_the_same(fast_overrides):
    # train_batch_size 4 = ppo_mini_batch_size 4: one optimizer step per rollout, so π_old is the
    # update's own forward; recomputing it first must give the very same update.
    single = fast_overrides + ["actor.ppo_mini_batch_size=4"]
    skipped, seen_skip = _one_update_run(single)
    recomputed, seen_full = _one_update_run(single + ["actor.recompute_old_log_probs=always"])
    assert "old_log_probs" not in seen_skip["batch"] and "old_log_probs" in seen_full["batch"]
    assert "ref_log_probs" in seen_skip["batch"], "GRPO's KL loss still needs the reference"
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert seen_skip["metrics"][key] == pytest.approx(seen_full["metrics"][key], rel=1e-5, abs=1e-7), key
    # Two optimizer steps per rollout (the fixture's default) keep the recomputation.
    _, seen_two = _one_update_run(fast_overrides)
    assert "old_log_probs" in seen_two["batch"]


def test_with_two_optimizer_steps_only_the_second_mini_batch_gets_an_old_policy_forward(fast_overrides):
    # 4 prompts × 2 samples, mini-batches of 2 prompts: the first step's 4 rows take π_old from the update's own
    # forward (ratio 1), the second's 4 rows from a forward before the update, as with full recomputation.
    trainer, partial = _one_update_run(fast_overrides)
    _, full = _one_update_run(fast_overrides + ["actor.recompute_old_log_probs=always"])
    flags = partial["batch"][OLD_FROM_UPDATE]
    assert flags.tolist() == [True] * 4 + [False] * 4 and OLD_FROM_UPDATE not in full["batch"]
    assert partial["batch"]["old_log_probs"][:4].abs().sum() == 0  # never read: the loss takes the update's forward
    assert torch.allclose(partial["batch"]["old_log_probs"][4:], full["batch"]["old_log_probs"][4:], atol=1e-5)
    assert torch.allclose(partial["batch"]["ref_log_probs"], full["batch"]["ref_log_probs"], atol=1e-5)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/ppo_kl"):
        assert partial["metrics"][key] == pytest.approx(full["metrics"][key], rel=1e-4, abs=1e-6), key
    calls = []
    original = trainer.actor_rollout.compute_log_probs
    trainer.actor_rollout.compute_log_probs = lambda b: calls.append(len(b)) or original(b)
    dropped = ("old_log_probs", "ref_log_probs", OLD_FROM_UPDATE)
    rollout = Batch({k: v for k, v in partial["batch"].tensors.items() if k not in dropped}, partial["batch"].non_tensors)
    trainer.compute_log_probs(rollout)
    assert calls == [4]  # the second mini-batch's rows only


def test_bypass_mode_takes_the_old_policy_from_the_rollout_and_runs_no_old_policy_forward(fast_overrides):
    """verl's bypass mode: π_old is the sampling engine's log-probs (here the HF rollout's), so the old-policy
    forward before the update is not run, also with two optimizer steps per rollout, where it otherwise is;
    GRPO's reference still is."""
    trainer, seen = _one_update_run(fast_overrides + ["algorithm.rollout_correction.bypass_mode=true"])
    batch = seen["batch"]
    assert torch.equal(batch["old_log_probs"], batch["rollout_log_probs"]) and "ref_log_probs" in batch
    assert batch["rollout_log_probs"].abs().sum() > 0  # real log-probs, not the zeros of an engine without them
    calls = []
    original = trainer.actor_rollout.compute_log_probs
    trainer.actor_rollout.compute_log_probs = lambda b: calls.append(len(b)) or original(b)
    trainer.compute_log_probs(batch)
    assert calls == []
    for bad, message in ((["rollout.calculate_log_probs=false"], "with rollout.calculate_log_probs=false"),
                         (["algorithm.rollout_correction.mode=tis"], "mode=tis with bypass_mode=true")):
        with pytest.raises(ConfigError, match=message):
            validate_config(load_config("grpo", fast_overrides + ["algorithm.rollout_correction.bypass_mode=true", *bad]))


def test_recompute_old_log_probs_rejects_unknown_values(fast_overrides):
    trainer = GRPOTrainer(load_config("grpo", fast_overrides + ["actor.recompute_old_log_probs=never"]))
    with pytest.raises(ValueError, match="actor.recompute_old_log_probs"):
        trainer.fit()


def test_val_before_train_false_skips_step_0_but_validates_at_the_end(fast_overrides):
    # The leaderboard's jobs whose step 0 is the pretrained model's own evaluation run like this.
    overrides = fast_overrides + ["trainer.test_freq=2", "trainer.total_steps=2", "data.val_max_samples=4",
                                  "trainer.val_before_train=false"]
    trainer = GRPOTrainer(load_config("grpo", overrides))
    trainer.fit()
    assert [step for step, _ in trainer.val_history] == [2]
    assert "val/acc" in trainer.val_history[0][1]
    assert "perf/start_s/first_validation" not in trainer.start_record
