"""Ours beside verl on one saved rollout batch: old log-probs, GRPO advantages and the clipped policy loss, as the
largest absolute difference, so that the speed ratio of bench/verl/suite.sh compares the same computation.

    python -m bench.verl.numerics --batch batch.pt --model-dir DIR --out numerics.json [--device cuda]

Run in verl's environment (ours is installed there too: bench/verl/suite.sh's `VERL_PY`). The batch is one step of
our run, written by `trainer.save_batch_step` (format: core/data/batch_file.py): tokens, rewards and prompt groups.

Ours: the policy forward of core/engine (FSDPEngine.compute_log_probs: packed where it runs on CUDA), the `grpo`
advantage estimator and the `vanilla` policy loss (token-mean, clip 0.2/0.28, dual clip 10: the dapo8b shape).
verl: `compute_grpo_outcome_advantage` and the `vanilla` policy loss from verl.trainer.ppo.core_algos, driven
in-process on the same tensors (pure functions: no GPU, no Ray). Each loss is evaluated twice: at the first update,
where the current policy is π_old (ratio 1: the loss is −token-mean of the advantages), and at a seeded
perturbation of the current log-probs (the same for both), which makes the clip and the dual clip act.
Where no prompt group's rewards vary (a random-init model scores 0 on every response), every GRPO advantage is 0 in
both frameworks and the loss comparison would compare zeros: both then take the same synthetic outcome rewards,
bench/common/varied_reward.py's hash of each response (here of its token ids), and the report says so (`rewards`).
verl's old log-probs come from its own actor (bench/verl/log_probs.py, packed with flash-attn on a GPU):
`--verl-log-probs FILE`, the (B, T_resp) tensor that script saves, adds them to the comparison; without it, verl's
loss uses ours.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from core.batch import Batch
from core.data.batch_file import load_batch_argument

# The dapo8b shape's loss (bench/verl/grpo_gpu.py, recipes/dapo/run_qwen3_8b.sh).
CLIP = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 10.0}
PERTURBATION = 0.3  # std of the seeded log-prob shift: ratios of e^±0.3 cross both clip bounds


def perturbed(log_probs: torch.Tensor, mask: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """The current policy's log-probs at a seeded shift from π_old, zero off the response tokens."""
    noise = torch.randn(log_probs.shape, generator=torch.Generator().manual_seed(seed)) * PERTURBATION
    return (log_probs + noise) * mask


def groups_vary(batch: Batch) -> bool:
    """Whether any prompt group's outcome rewards differ, i.e. whether any GRPO advantage is non-zero."""
    scores = batch["token_level_rewards"].sum(-1)
    uids = batch.non_tensors["uid"]
    return any(len({float(score) for score, uid in zip(scores, uids) if uid == group}) > 1 for group in set(uids))


def with_synthetic_rewards(batch: Batch) -> Batch:
    """The batch with outcome rewards (sum of response token ids mod 7) / 6 on each response's last token: they
    vary within groups, as bench/common/varied_reward.py's do for the timing runs, and are the same for both frameworks."""
    mask = batch["response_mask"]
    scores = ((batch["responses"] * mask).sum(-1) % 7).float() / 6
    rewards = torch.zeros(mask.shape, dtype=torch.float32)
    rewards[torch.arange(len(batch)), mask.sum(-1).clamp(min=1) - 1] = scores
    return Batch(tensors=batch.tensors | {"token_level_rewards": rewards}, non_tensors=batch.non_tensors)


def ours_log_probs(batch: Batch, model_dir: str, device: str, micro_batch_tokens: int) -> torch.Tensor:
    """(B, T_resp) π_old as our trainer computes it: bf16 compute over fp32 weights on CUDA, fp32 on CPU."""
    from core.engine.distributed import init_distributed
    from core.engine.fsdp import FSDPEngine
    from core.models.loading import load_causal_lm

    engine = FSDPEngine(load_causal_lm(model_dir), init_distributed(device), micro_batch_tokens=micro_batch_tokens,
                        mixed_precision="bf16" if device == "cuda" else "fp32")
    return engine.compute_log_probs(batch)


def ours_losses(batch: Batch, old_log_probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Our GRPO advantages and vanilla policy loss (at ratio 1 and perturbed) on `old_log_probs`."""
    from core.algos.advantages import ADV_ESTIMATORS
    from core.algos.policy_loss import POLICY_LOSSES

    mask = batch["response_mask"]
    advantages, _ = ADV_ESTIMATORS.get("grpo")(token_level_rewards=batch["token_level_rewards"], response_mask=mask,
                                              group_ids=batch.non_tensors["uid"])
    loss_fn = POLICY_LOSSES.get("vanilla")
    normalisers = dict(loss_agg_mode="token-mean", num_tokens=int(mask.sum()), num_seqs=len(batch),
                       max_response_length=mask.shape[1], **CLIP)
    return {"advantages": advantages,
            "pg_loss": loss_fn(old_log_probs, old_log_probs, advantages, mask, **normalisers)[0],
            "pg_loss_perturbed": loss_fn(perturbed(old_log_probs, mask), old_log_probs, advantages, mask,
                                         **normalisers)[0]}


def verl_losses(batch: Batch, old_log_probs: torch.Tensor) -> dict[str, torch.Tensor]:
    """verl 0.9.1's GRPO advantages and vanilla policy loss on the same inputs (verl's environment only)."""
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig

    mask = batch["response_mask"]
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=batch["token_level_rewards"], response_mask=mask, index=batch.non_tensors["uid"],
        norm_adv_by_std_in_grpo=True)
    config = ActorConfig(strategy="fsdp", use_dynamic_bsz=True, ppo_mini_batch_size=len(batch), rollout_n=1, **CLIP)
    loss_fn = core_algos.get_policy_loss_fn("vanilla")

    def loss(log_probs):
        return loss_fn(old_log_prob=old_log_probs, log_prob=log_probs, advantages=advantages, response_mask=mask,
                       loss_agg_mode="token-mean", config=config)[0]

    return {"advantages": advantages, "pg_loss": loss(old_log_probs),
            "pg_loss_perturbed": loss(perturbed(old_log_probs, mask))}


def max_abs_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Largest |a − b| over the response tokens (`mask`), or over everything for scalars."""
    diff = (a.float() - b.float()).abs()
    return float(diff[mask.bool()].max()) if mask is not None and bool(mask.any()) else float(diff.max())


def compare(batch: Batch, ours: dict, verl: dict) -> dict[str, float]:
    """{name: max |ours − verl|}: per token for log-probs and advantages, the loss as one number."""
    mask = batch["response_mask"]
    rows = {key: max_abs_diff(ours[key], verl[key], mask if ours[key].dim() else None)
            for key in ("old_log_probs", "advantages", "pg_loss", "pg_loss_perturbed") if key in ours and key in verl}
    if "rollout_log_probs" in batch.tensors:  # context: how far each trainer's forward is from the engine's
        for side, values in (("ours", ours), ("verl", verl)):
            if "old_log_probs" in values:
                rows[f"{side}_vs_rollout_log_probs"] = max_abs_diff(values["old_log_probs"], batch["rollout_log_probs"],
                                                                    mask)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", required=True)
    parser.add_argument("--model-dir", required=True, help="the HF checkpoint the batch was sampled from")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--micro-batch-tokens", type=int, default=16384)
    parser.add_argument("--verl-log-probs", help="verl's (B, T_resp) old log-probs of the batch (torch.save'd)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    batch = load_batch_argument(parser, args.batch)
    ours = {"old_log_probs": ours_log_probs(batch, args.model_dir, args.device, args.micro_batch_tokens)}
    rewards = "the rollout's"
    if not groups_vary(batch):
        batch, rewards = with_synthetic_rewards(batch), "synthetic"
    ours |= ours_losses(batch, ours["old_log_probs"])
    verl = {"old_log_probs": torch.load(args.verl_log_probs, weights_only=True)} if args.verl_log_probs else {}
    verl |= verl_losses(batch, verl.get("old_log_probs", ours["old_log_probs"]))
    report = {"batch": args.batch, "rows": len(batch), "response_tokens": int(batch["response_mask"].sum()),
              "verl_log_probs": args.verl_log_probs, "rewards": rewards, "max_abs_diff": compare(batch, ours, verl),
              "pg_loss": {"ours": float(ours["pg_loss"]), "verl": float(verl["pg_loss"])}}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["max_abs_diff"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
