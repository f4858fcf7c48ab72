"""bench/verl/numerics.py on CPU: our side on the tiny model's saved batch, the diff bookkeeping, a hand-computed
advantage and loss, and verl's core_algos beside ours (skipped where verl is not importable). The batch file's own
round trip is tests/test_save_batch.py's."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# By file, not as `tests.helpers_policy`: verl's wheel installs a top-level `tests` package of its own.
sys.path.insert(0, str(ROOT / "tests"))

from helpers_policy import sampled_batch, tiny_policy  # noqa: E402

from bench.verl import numerics  # noqa: E402
from core.batch import Batch  # noqa: E402
from core.data.batch_file import load_batch, save_batch  # noqa: E402
from core.models.tiny import build_tiny_tokenizer  # noqa: E402

needs_verl = pytest.mark.skipif(importlib.util.find_spec("verl") is None,
                                reason="verl is installed in its own environment (bench/requirements-verl.txt)")


def hand_batch() -> Batch:
    """Groups a = (1, 0) and b = (3, 1) of outcome rewards; responses of 1, 2, 2 and 3 tokens."""
    lengths, rewards = [1, 2, 2, 3], [1.0, 0.0, 3.0, 1.0]
    mask = torch.tensor([[1] * n + [0] * (3 - n) for n in lengths])  # (4, 3)
    token_rewards = torch.zeros(4, 3)
    token_rewards[torch.arange(4), torch.tensor(lengths) - 1] = torch.tensor(rewards)  # on the last token
    return Batch(tensors={"response_mask": mask, "token_level_rewards": token_rewards},
                 non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)})


def test_grpo_advantages_and_the_loss_at_ratio_one_by_hand():
    batch = hand_batch()
    out = numerics.ours_losses(batch, torch.zeros(4, 3))
    # Each group: mean ± 1/√2 · std, so A = ±1/√2 (unbiased std, ε = 1e-6 aside): (+, −, +, −).
    a = 1 / np.sqrt(2)
    torch.testing.assert_close(out["advantages"][:, 0], torch.tensor([a, -a, a, -a], dtype=torch.float32), atol=1e-5,
                               rtol=0)
    # ratio 1: token-mean of −A = −(a·1 − a·2 + a·2 − a·3) / 8 = 2a / 8.
    assert float(out["pg_loss"]) == pytest.approx(2 * a / 8, abs=1e-5)
    assert float(out["pg_loss_perturbed"]) != pytest.approx(float(out["pg_loss"]))  # the clip has work to do


def test_diffs_count_only_response_tokens():
    batch = hand_batch()
    ours = {"advantages": torch.zeros(4, 3), "pg_loss": torch.tensor(0.5)}
    verl = {"advantages": torch.zeros(4, 3), "pg_loss": torch.tensor(0.25)}
    verl["advantages"][0, 2] = 100.0  # a padding token: not compared
    verl["advantages"][3, 2] = -0.125
    assert numerics.compare(batch, ours, verl) == {"advantages": 0.125, "pg_loss": 0.25}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny policy saved as an HF dir, and a batch it sampled, with rewards and groups, saved as the GPU run
    would save it."""
    tmp = tmp_path_factory.mktemp("numerics")
    tokenizer = build_tiny_tokenizer()
    model = tiny_policy(tokenizer)
    model.save_pretrained(tmp / "model")
    batch = sampled_batch(model, tokenizer, tmp, prompts=4, n=3, max_new_tokens=12)
    mask = batch["response_mask"]
    rewards = torch.zeros(mask.shape)
    rewards[torch.arange(len(batch)), mask.sum(1) - 1] = torch.arange(len(batch), dtype=torch.float32) % 3
    batch.tensors["token_level_rewards"] = rewards
    batch.non_tensors["uid"] = np.array([str(row // 3) for row in range(len(batch))], dtype=object)  # as the trainer
    save_batch(batch, tmp / "batch.pt")
    return tmp, model, load_batch(tmp / "batch.pt")


def test_our_old_log_probs_are_the_models_own_log_softmax(saved):
    tmp, model, batch = saved
    ours = numerics.ours_log_probs(batch, str(tmp / "model"), "cpu", micro_batch_tokens=64)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits
    width = batch["responses"].shape[1]
    naive = torch.log_softmax(logits[:, -width - 1:-1].float(), -1).gather(-1, batch["responses"][..., None])[..., 0]
    torch.testing.assert_close(ours, naive * batch["response_mask"], rtol=1e-5, atol=1e-5)


@needs_verl
def test_verls_advantages_and_loss_equal_ours_on_the_same_batch(saved):
    _, _, batch = saved
    old = -torch.rand(batch["response_mask"].shape, generator=torch.Generator().manual_seed(0)) * batch["response_mask"]
    diffs = numerics.compare(batch, numerics.ours_losses(batch, old), numerics.verl_losses(batch, old))
    assert set(diffs) == {"advantages", "pg_loss", "pg_loss_perturbed"}
    assert max(diffs.values()) < 1e-6, diffs


def test_a_batch_file_that_is_missing_or_not_a_saved_batch_is_one_line(tmp_path, capsys):
    foreign = tmp_path / "foreign.pt"
    torch.save({"input_ids": torch.zeros(1, 2)}, foreign)
    for path, expected in ((tmp_path / "absent.pt", "No such file"), (foreign, "lacks ['attention_mask'")):
        with pytest.raises(SystemExit) as exit_info:
            numerics.main(["--batch", str(path), "--model-dir", str(tmp_path), "--out", str(tmp_path / "o.json")])
        assert exit_info.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"error: --batch {path}: " in error and expected in error, error
    assert not (tmp_path / "o.json").exists()


def test_a_rollout_whose_groups_all_scored_alike_gets_varied_synthetic_rewards():
    batch = hand_batch()
    batch.tensors["responses"] = torch.tensor([[5, 0, 0], [3, 4, 0], [1, 1, 0], [2, 2, 2]])
    assert numerics.groups_vary(batch)
    batch.tensors["token_level_rewards"] = torch.zeros(4, 3)  # a random-init model: every response scores 0
    assert not numerics.groups_vary(batch)
    synthetic = numerics.with_synthetic_rewards(batch)
    # (sum of the response's token ids mod 7) / 6 on its last token: 5, 7 → 0, 2, 6 → 5/6, 0, 2/6, 6/6.
    expected = torch.zeros(4, 3)
    expected[0, 0], expected[2, 1], expected[3, 2] = 5 / 6, 2 / 6, 1.0
    torch.testing.assert_close(synthetic["token_level_rewards"], expected)
    assert numerics.groups_vary(synthetic)
    assert float(numerics.ours_losses(synthetic, torch.zeros(4, 3))["pg_loss"]) != 0.0
