"""DAPO's data side on the random tiny model: dynamic sampling never trains on an all-equal group,
gives up loudly after `max_num_gen_batches`, and overlong shaping costs a full-length response −factor."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from core.algos.advantages import group_indices
from core.batch import Batch
from core.cli import main as cli_main
from core.config import load_config
from core.data.dataset import collate_prompts
from core.leaderboard.export import DYNAMIC_SAMPLING_KEYS
from core.reward.manager import place_on_last_token
from core.rollout.base import concat_rollouts
from recipes.dapo.trainer import DAPOTrainer

N = 4  # samples per prompt


class ParityReward:
    """Controlled scores: a prompt with an even dataset index scores 1 on every sample (a uniform
    group, to be dropped); an odd one alternates 0, 1, 0, 1 over its adjacent samples. Every group is
    uniform when `all_uniform`, or in the first `uniform_rounds` calls."""

    def __init__(self, all_uniform=False, uniform_rounds=0):
        self.all_uniform, self.uniform_rounds = all_uniform, uniform_rounds
        self.calls, self.uniform_indices = 0, set()

    def __call__(self, batch):
        self.calls += 1
        uniform = self.all_uniform or self.calls <= self.uniform_rounds
        even = torch.tensor([uniform or int(i) % 2 == 0 for i in batch["index"]])  # (B,)
        self.uniform_indices |= {int(i) for i, e in zip(batch["index"], even) if e}
        scores = torch.where(even, 1.0, (torch.arange(len(batch)) % 2).float())  # (B,)
        return place_on_last_token(scores, batch["response_mask"]), {"score": scores.tolist(), "acc": scores.tolist()}


def dapo_trainer(fast_overrides, *extra):
    return DAPOTrainer(load_config("dapo", fast_overrides + [f"rollout.n={N}", *extra]))


def test_dynamic_sampling_trains_only_on_groups_with_different_scores(fast_overrides):
    trainer = dapo_trainer(fast_overrides, "trainer.total_steps=3", "reward.overlong_buffer.enable=false")
    trainer.reward_manager = reward = ParityReward()
    updates, logged = [], []
    update, log = trainer.update_policy, trainer.tracking.log_metrics
    trainer.update_policy = lambda batch: updates.append(batch) or update(batch)
    trainer.tracking.log_metrics = lambda metrics, step: logged.append(metrics) or log(metrics, step=step)
    trainer.fit()

    assert len(updates) == 3
    assert reward.calls > 3 and reward.uniform_indices, "some round must have produced uniform groups to drop"
    for batch in updates:
        groups = group_indices(batch["uid"])
        assert len(groups) == 4 and all(len(rows) == N for rows in groups)  # exactly data.train_batch_size
        scores = batch["token_level_scores"].sum(-1)
        for rows in groups:
            assert len(set(scores[rows].tolist())) > 1, "a group with all-equal scores reached update_policy"
        assert not {int(i) for i in batch["index"]} & reward.uniform_indices
    assert sum(m["dapo/num_gen_batches"] for m in logged if "dapo/num_gen_batches" in m) == reward.calls
    assert all(set(DYNAMIC_SAMPLING_KEYS) <= m.keys() for m in logged if "dapo/num_gen_batches" in m)  # exported
    assert all(0 < m["dapo/kept_group_ratio"] <= 1 for m in logged if "dapo/kept_group_ratio" in m)


def test_all_uniform_groups_fail_after_max_num_gen_batches(fast_overrides):
    trainer = dapo_trainer(fast_overrides, "algorithm.filter_groups.max_num_gen_batches=3")
    trainer.reward_manager = reward = ParityReward(all_uniform=True)
    with pytest.raises(RuntimeError) as error:
        trainer.fit()
    message = str(error.value)
    assert "algorithm.filter_groups.max_num_gen_batches=3" in message
    assert "only 0 of 4 prompt groups" in message and "12 prompts" in message
    assert reward.calls == 3


def test_no_limit_samples_past_the_default_cap_until_the_batch_is_full(fast_overrides):
    # 0 lifts the cap (verl's "endless trials"): 12 all-uniform rounds, more than the default 10, then mixed ones.
    trainer = dapo_trainer(fast_overrides, "trainer.total_steps=1", "algorithm.filter_groups.max_num_gen_batches=0")
    trainer.reward_manager = reward = ParityReward(uniform_rounds=12)
    updates = []
    update = trainer.update_policy
    trainer.update_policy = lambda batch: updates.append(batch) or update(batch)
    trainer.fit()
    assert reward.calls > 12 and len(updates) == 1 and len(group_indices(updates[0]["uid"])) == 4


def test_a_response_of_length_l_max_loses_the_penalty_factor(fast_overrides):
    # data.max_response_length=6 (fast_overrides), buffer 4: no penalty up to length 2, −factor at 6.
    trainer = dapo_trainer(fast_overrides, "algorithm.filter_groups.enable=false", "reward.overlong_buffer.len=4",
                           "reward.overlong_buffer.penalty_factor=0.5")
    trainer.reward_manager.scorers, trainer.reward_manager.default_scorer = {}, lambda text, truth: 1.0
    lengths = torch.tensor([6, 2, 5, 0])
    mask = (torch.arange(6) < lengths[:, None]).long()  # (4, 6)
    batch = Batch({"responses": torch.randint(10, 40, (4, 6)), "response_mask": mask},
                  {"data_source": np.array(["arithmetic"] * 4, dtype=object),
                   "ground_truth": np.array(["1"] * 4, dtype=object)})
    scores = trainer.compute_rewards(batch)["token_level_scores"]
    assert scores.sum(-1).tolist() == pytest.approx([1.0 - 0.5, 1.0, 1.0 - 0.5 * 3 / 4, 1.0])
    assert scores[0, 5] == pytest.approx(0.5) and scores[2, 4] == pytest.approx(1.0 - 0.375)  # on the last token


def test_rounds_of_different_widths_join_without_changing_any_log_prob(fast_overrides):
    trainer = dapo_trainer(fast_overrides, "algorithm.filter_groups.enable=false")
    dataset = trainer.train_loader.dataset
    by_length = sorted(range(len(dataset)), key=lambda i: len(dataset[i].prompt_ids))
    params = replace(trainer.sampling_params(), n=1)
    short = trainer.actor_rollout.generate(collate_prompts([dataset[i] for i in by_length[:2]], dataset.pad_token_id),
                                           replace(params, max_new_tokens=6))
    long = trainer.actor_rollout.generate(collate_prompts([dataset[i] for i in by_length[-2:]], dataset.pad_token_id),
                                          replace(params, max_new_tokens=3))
    assert short["prompts"].shape[1] < long["prompts"].shape[1] and short["responses"].shape[1] > long["responses"].shape[1]

    joined = concat_rollouts([short, long], dataset.pad_token_id).check("concat")
    assert joined["input_ids"].shape[1] == long["prompts"].shape[1] + short["responses"].shape[1]
    assert torch.equal(joined["input_ids"][:, -joined["responses"].shape[1]:], joined["responses"])
    log_probs = trainer.actor_rollout.compute_log_probs(joined)["old_log_probs"]
    for rows, part in ((slice(0, 2), short), (slice(2, 4), long)):
        width = part["responses"].shape[1]
        expected = trainer.actor_rollout.compute_log_probs(part)["old_log_probs"]
        torch.testing.assert_close(log_probs[rows, :width], expected, atol=1e-5, rtol=1e-5)
        assert log_probs[rows, width:].abs().sum() == 0 and joined["response_mask"][rows, width:].sum() == 0


@pytest.mark.parametrize("dry_run", [False, True])
def test_filter_groups_with_a_trainer_that_ignores_it_is_refused(fast_overrides, tmp_path, capsys, dry_run):
    """Only DAPO's trainer samples dynamically: with GRPO's the key would do nothing, so it is refused."""
    code = cli_main(["train", "--recipe", "grpo", *fast_overrides, "algorithm.filter_groups.enable=true",
                     *(["--dry-run"] if dry_run else [])])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not (tmp_path / "out").exists()
    assert err == ("recipezoo: config error: algorithm.filter_groups.enable=true with "
                   "trainer.cls=recipes.grpo.trainer.GRPOTrainer — dynamic sampling is DAPO's trainer's own step "
                   "(recipes/dapo/trainer.py), which this trainer does not run; use --recipe dapo, or a trainer.cls "
                   "that subclasses DAPOTrainer")
