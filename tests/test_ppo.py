"""PPO: the critic's values line up with response tokens, and one step trains critic and actor."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_dry_run import gsm8k_rows

from core.batch import Batch
from core.config import load_config
from core.data.rows import write_rows
from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.models.loading import load_causal_lm, load_value_model
from recipes.ppo.trainer import PPOTrainer

REPO = Path(__file__).resolve().parent.parent
PROMPT_LEN, RESPONSE_LEN = 4, 5


def response_batch(vocab_size: int) -> Batch:
    """Left-padded prompts (row 1 has one pad) and right-padded responses of lengths 5 and 3."""
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, vocab_size, (2, PROMPT_LEN), generator=g)
    responses = torch.randint(3, vocab_size, (2, RESPONSE_LEN), generator=g)
    response_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    prompt_mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]])
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return Batch({"prompts": prompts, "responses": responses, "response_mask": response_mask,
                  "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention_mask,
                  "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0)})


def test_critic_value_of_response_token_t_is_the_output_before_it(random_model_dir):
    critic = load_value_model(random_model_dir)
    # The critic is the actor's body with a fresh one-label head.
    actor_weights = load_causal_lm(random_model_dir).state_dict()
    body = {k: v for k, v in critic.state_dict().items() if not k.startswith("score.")}
    assert body and all(torch.equal(v, actor_weights[k]) for k, v in body.items())
    assert critic.score.out_features == 1

    batch = response_batch(critic.config.vocab_size)
    engine = FSDPEngine(critic, init_distributed("cpu"), micro_batch_size=1, mixed_precision="fp32", head="value")
    values = engine.compute_values(batch)
    assert values.shape == (2, RESPONSE_LEN)
    assert (values[1, 3:] == 0).all(), "masked response tokens must have value 0"

    # By hand: V for response token t is the head's output at the sequence position just before it.
    with torch.no_grad():
        full = engine.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            position_ids=batch["position_ids"]).logits[..., 0]  # (B, P + T_resp)
    for row, length in enumerate(batch["response_mask"].sum(-1).tolist()):
        for t in range(length):
            assert values[row, t].item() == pytest.approx(full[row, PROMPT_LEN + t - 1].item(), abs=1e-5)

    # And so V_t sees response tokens < t only: changing token 2 moves V_3, never V_0..V_2.
    changed = response_batch(critic.config.vocab_size)
    changed.tensors["responses"][:, 2] = (changed["responses"][:, 2] + 1) % critic.config.vocab_size
    changed.tensors["input_ids"] = torch.cat([changed["prompts"], changed["responses"]], dim=1)
    moved = engine.compute_values(changed)
    torch.testing.assert_close(moved[:, :3], values[:, :3])
    assert (moved[0, 3] - values[0, 3]).abs() > 1e-6


def test_a_zeros_value_head_starts_every_value_at_zero_and_still_learns(random_model_dir):
    normal, zeros = load_value_model(random_model_dir), load_value_model(random_model_dir, head_init="zeros")
    batch = response_batch(zeros.config.vocab_size)
    values = {}
    for name, critic in (("normal", normal), ("zeros", zeros)):
        engine = FSDPEngine(critic, init_distributed("cpu"), micro_batch_size=1, mixed_precision="fp32", head="value")
        values[name] = engine.compute_values(batch)
    assert values["normal"][batch["response_mask"].bool()].abs().min() > 0, "HF's random head gives values ≠ 0"
    assert (values["zeros"] == 0).all()
    # V ≡ 0 is no dead end: dV/dw of the head is the body's hidden state, which is not zero.
    fresh = load_value_model(random_model_dir, head_init="zeros")
    fresh(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.sum().backward()
    assert fresh.score.weight.grad.abs().sum() > 0


def test_a_trained_value_head_is_kept_whatever_value_head_init_says(random_model_dir, tmp_path):
    trained = load_value_model(random_model_dir)
    with torch.no_grad():
        trained.score.weight.fill_(0.5)
    trained.save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (Path(random_model_dir) / name).exists():
            (tmp_path / name).write_bytes((Path(random_model_dir) / name).read_bytes())
    reloaded = load_value_model(str(tmp_path), head_init="zeros")
    assert (reloaded.score.weight == 0.5).all()


def test_value_engine_update_is_the_plain_autograd_step(random_model_dir):
    critic = load_value_model(random_model_dir)
    plain = copy.deepcopy(critic)
    batch = response_batch(critic.config.vocab_size)
    engine = FSDPEngine(critic, init_distributed("cpu"), optim=OptimConfig(lr=1.0, weight_decay=0.0, grad_clip=1e9),
                        micro_batch_size=1, mixed_precision="fp32", head="value")
    engine.optimizer = torch.optim.SGD(engine.model.parameters(), lr=1.0)  # the update is exactly −grad

    def loss_fn(values, micro, num_tokens, num_seqs):
        return ((values - 1.0).square() * micro["response_mask"]).sum() / num_tokens, {}

    metrics = engine.update(batch, loss_fn, mini_batch_size=len(batch))
    assert set(metrics) == {"critic/grad_norm", "critic/lr", "critic/skipped_steps"}
    values = plain(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   position_ids=batch["position_ids"]).logits[:, PROMPT_LEN - 1 : -1, 0]  # (B, T_resp)
    mask = batch["response_mask"]
    (((values - 1.0).square() * mask).sum() / mask.sum()).backward()
    updated = engine.full_state_dict()
    for name, param in plain.named_parameters():
        torch.testing.assert_close(updated[name], param.detach() - param.grad, atol=1e-6, rtol=0, msg=name)


def ppo_trainer(fast_overrides, *extra: str) -> PPOTrainer:
    # n=1: 4 prompts are 4 sequences, 2 per mini-batch, so actor and critic each take 2 steps.
    return PPOTrainer(load_config("ppo", fast_overrides + ["rollout.n=1", *extra]))


def snapshot(engine: FSDPEngine) -> dict[str, torch.Tensor]:
    # Cloned: on one CPU rank the state dict's tensors are the live parameters.
    return {k: v.clone() for k, v in engine.full_state_dict().items()}


def changed(before: dict, after: dict) -> bool:
    return any(not torch.equal(before[k], after[k]) for k in before)


def test_one_ppo_step_trains_the_critic_on_gae_returns(fast_overrides):
    trainer = ppo_trainer(fast_overrides)
    critic_before, actor_before = snapshot(trainer.critic.engine), snapshot(trainer.actor_rollout.actor)
    seen = {}
    original = trainer.update_critic

    def spy(batch):
        seen["batch"], seen["metrics"] = batch, original(batch)
        return seen["metrics"]

    trainer.update_critic = spy
    trainer.fit()
    batch, metrics = seen["batch"], seen["metrics"]
    rows, width = batch["responses"].shape
    assert rows == 4
    for key in ("values", "returns", "advantages"):
        assert batch[key].shape == (rows, width), key
    mask = batch["response_mask"].bool()
    # GAE with γ = λ = 1: the return at every valid token is the outcome reward.
    torch.testing.assert_close(batch["returns"][mask], batch["token_level_rewards"].sum(-1, keepdim=True)
                               .expand_as(mask)[mask])
    for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr"):
        assert key in metrics, key
    assert metrics["critic/vf_loss"] > 0 and metrics["critic/lr"] == pytest.approx(1e-4)
    assert changed(critic_before, snapshot(trainer.critic.engine)), "the critic update changed no weight"
    assert changed(actor_before, snapshot(trainer.actor_rollout.actor)), "critic_warmup=0: the actor trains"


def test_critic_warmup_holds_the_actor_for_its_steps_only(fast_overrides):
    trainer = ppo_trainer(fast_overrides, "trainer.total_steps=2", "trainer.critic_warmup=1")
    moved = {"critic": [], "actor": []}  # per step: did this stage change its model's weights?

    def watch(role, engine, update):
        def spy(batch):
            before = snapshot(engine)
            metrics = update(batch)
            moved[role].append((changed(before, snapshot(engine)), metrics))
            return metrics
        return spy

    trainer.update_critic = watch("critic", trainer.critic.engine, trainer.update_critic)
    trainer.update_policy = watch("actor", trainer.actor_rollout.actor, trainer.update_policy)
    trainer.fit()
    (critic_1, critic_metrics_1), (critic_2, _) = moved["critic"]
    (actor_1, actor_metrics_1), (actor_2, actor_metrics_2) = moved["actor"]
    assert critic_1 and "critic/vf_loss" in critic_metrics_1 and critic_2
    assert not actor_1 and actor_metrics_1 == {}, "step 1 is critic warm-up: the actor must not change"
    assert actor_2 and "actor/pg_loss" in actor_metrics_2


def test_ppo_without_gae_says_which_key_to_set(fast_overrides):
    with pytest.raises(ValueError, match="algorithm.adv_estimator=gae"):
        ppo_trainer(fast_overrides, "algorithm.adv_estimator=grpo")


def test_run_qwen3_8b_dry_run_plans_a_critic(tmp_path):
    data = tmp_path / "gsm8k"
    write_rows(gsm8k_rows(), data / "train.parquet")
    write_rows(gsm8k_rows(), data / "test.parquet")
    env = dict(os.environ, DATA=str(data), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               RECIPEZOO_CACHE=str(tmp_path / "cache"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    result = subprocess.run(["bash", str(REPO / "recipes" / "ppo" / "run_qwen3_8b.sh"), "--dry-run"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    plan = result.stdout
    assert "recipes.ppo.trainer.PPOTrainer" in plan
    assert "actor+rollout (colocated on 8 GPUs); critic (on 8 GPUs)" in plan
    assert "rollout      vllm: n=1" in plan
    assert "sequences/step            1024" in plan and "= 4 optimizer steps" in plan
    assert "advantages gae (gamma 1.0, lambda 1.0)" in plan and "lr 1e-06" in plan
    assert "KL           off" in plan
    assert "critic       Qwen/Qwen3-8B + scalar value head; lr 1e-05" in plan
    assert "actor waits 0 steps" in plan
