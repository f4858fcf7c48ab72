"""`trainer.controller`: who runs the roles. Local: in this process (one per rank under torchrun);
ray: a group of Ray actors driven from here. Above `setup`, which builds the process group, data
and tracking and is handed `build_roles`, so setup never imports a controller.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.engine.distributed import World
from core.trainer.judge_worker import JudgeWorker
from core.trainer.reward_model_worker import RewardModelWorker
from core.trainer.workers import ActorRolloutRefWorker, CriticWorker


@dataclass
class Roles:
    actor_rollout: ActorRolloutRefWorker  # or a RayWorkerGroup with the same methods
    critic: CriticWorker | None  # or the group's RayCritic; None for critic-free recipes
    reward_model: RewardModelWorker | None = None  # or the group's RayRewardModel; None without reward.model.path
    judge: JudgeWorker | None = None  # or the group's RayJudge; None without reward.judge.enable


def build_roles(config, world: World, model_path: str, tokenizer, *, with_reference: bool, with_critic: bool,
                num_workers: int) -> Roles:
    """The actor+rollout+ref role and, if `with_critic`, PPO's critic on the same devices; the rollout engines
    on devices of their own under `trainer.placement=disaggregated`; the reward model (`reward.model.path`) beside
    the policy, or under Ray with `reward.model.placement=separate` on devices of its own; the LLM judge
    (`reward.judge.enable`) beside the policy, each rank's (or Ray worker's) grading its share of the batch."""
    if config.trainer.controller == "ray":  # imported only here: ray is optional
        if config.trainer.placement == "disaggregated":
            from core.trainer.disaggregated import DisaggregatedGroup as Group
        else:
            from core.trainer.ray_controller import RayWorkerGroup as Group

        group = Group(config, model_path, tokenizer, with_reference=with_reference, with_critic=with_critic,
                      num_workers=num_workers)
        reward_model = group.reward_model
        if config.reward.model.path and config.reward.model.placement == "separate":
            from core.trainer.ray_reward_model import RayRewardModelGroup

            reward_model = RayRewardModelGroup(config, tokenizer)
        return Roles(group, group.critic, reward_model, group.judge)
    actor_rollout = ActorRolloutRefWorker(config, world, model_path, tokenizer, with_reference=with_reference)
    return Roles(actor_rollout, CriticWorker(config, world) if with_critic else None,
                 RewardModelWorker(config, world, tokenizer) if config.reward.model.path else None,
                 JudgeWorker(config, world.device, tokenizer) if config.reward.judge.enable else None)
