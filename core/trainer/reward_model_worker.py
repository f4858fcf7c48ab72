"""The reward-model role: a scalar-head model that scores each rollout response at its last token.

Colocated with the policy it holds its weights in host memory between scorings (`reward.model.offload`, on a GPU)
and moves them to the device only while it scores, as the rollout engine sleeps while the policy trains; it runs
in bf16 on a GPU (`reward.model.mixed_precision=auto`) and packs its micro-batches by `reward.model.micro_batch_tokens`.
Under torchrun every rank holds its shard (FSDP2) and scores its own rows, as the actor does.
"""

from __future__ import annotations

import torch

from core.batch import Batch
from core.config import ConfigError
from core.engine.distributed import World
from core.engine.fsdp import FSDPEngine
from core.models.loading import load_tokenizer, resolve_model_path
from core.models.reward_model import load_reward_model
from core.trainer.start_record import start_phase

RM_SCORES = "rm_scores"  # the (B,) tensor `compute_rm_scores` returns


class RewardModelWorker:
    def __init__(self, config, world: World, policy_tokenizer, *, offload: bool | None = None):
        rm = config.reward.model
        self.world, self.start_record = world, {}
        path = resolve_model_path(rm.path)
        check_same_tokenizer(load_tokenizer(path, trust_remote_code=config.model.trust_remote_code), policy_tokenizer,
                             rm.path)
        with start_phase("reward_model", self.start_record):
            model = load_reward_model(path, config.model.trust_remote_code)
            self.engine = FSDPEngine(model, world, micro_batch_size=rm.micro_batch_size,
                                     micro_batch_tokens=rm.micro_batch_tokens, mixed_precision=rm.mixed_precision,
                                     head="reward")
        self.offload = (rm.offload if offload is None else offload) and world.device.type == "cuda"
        if self.offload:
            self._move_to(torch.device("cpu"))

    def compute_rm_scores(self, batch: Batch) -> Batch:
        """(B,) scores of the rollout rows (`input_ids`, `attention_mask`, `position_ids`), no grad."""
        if self.offload:
            self._move_to(self.world.device)
        try:
            return Batch({RM_SCORES: self.engine.compute_scores(batch)})
        finally:
            if self.offload:
                self._move_to(torch.device("cpu"))

    def _move_to(self, device: torch.device) -> None:
        # The sharded module as a whole, as verl offloads an FSDP2 model: each rank moves its own shards.
        self.engine.model.to(device)
        if device.type == "cpu" and torch.cuda.is_available():
            torch.cuda.empty_cache()


def check_same_tokenizer(rm_tokenizer, policy_tokenizer, path: str) -> None:
    """The reward model reads the policy's token ids as they are, so both must tokenize alike."""
    if rm_tokenizer.get_vocab() != policy_tokenizer.get_vocab():
        raise ConfigError(f"reward.model.path={path!r}: its tokenizer differs from the policy's ({len(rm_tokenizer)} "
                          f"vs {len(policy_tokenizer)} tokens); the reward model scores the policy's token ids, so train "
                          "it from the policy's model family (`recipezoo rm --model <the policy>`)")
