"""A tp group of 2 generates a batch once, each rank its share (core/trainer/tp_generation.py), and validates each
prompt once (core/trainer/validation.py).

`torchrun --nproc_per_node 2 tp_generation_check.py OUT`: both ranks hold the same 5 prompts, as a tp group's ranks
do, and generate them with ReMax's greedy baselines through TensorParallelGeneration; rank 0 saves the batch each
rank got, which calls of the engine each rank made, and the batch one process makes from the same shares. The engine
is a deterministic stand-in (no model): a sample's tokens are its prompt's index, its sample number and the call's
seed, with a length that varies by row, so shares of different widths must be padded back together. Then both
validate 257 prompts (the stand-in's verdict: right when the index is even) in calls of 128, saving the prompts of
each call and the metrics each rank got.
"""

import sys

import numpy as np
import torch

from core.batch import Batch
from core.data.dataset import PromptItem
from core.engine.distributed import all_gather_object, init_distributed, with_tensor_parallel
from core.rollout.base import (
    SamplingParams,
    concat_rollouts,
    greedy_baseline_params,
    rollout_from_token_lists,
    with_greedy_baselines,
)
from core.trainer.tp_generation import TensorParallelGeneration, prompt_shares, share_params
from core.trainer.validation import validate

PAD = 0


def engine_generate(prompts: Batch, params: SamplingParams, calls: list) -> Batch:
    """The stand-in engine's `generate_rollout`: n samples per prompt, then one greedy completion each."""
    calls.append(([int(index) for index in prompts["index"]], params.seed))

    def sample(p: SamplingParams) -> Batch:
        ids = [[int(index) + 1, k + 1, p.seed if p.seed is not None else 99][: 1 + (int(index) + k) % 3]
               for index in prompts["index"] for k in range(p.n)]
        return rollout_from_token_lists(prompts, ids, [[-0.5] * len(row) for row in ids], PAD, p.n)

    return with_greedy_baselines(sample(params), sample(greedy_baseline_params(params)), PAD)


def prompt_batch() -> Batch:
    widths = [2, 4, 1, 3, 2]  # left-padded prompts of different lengths
    prompts = torch.zeros((5, 4), dtype=torch.long)
    mask = torch.zeros((5, 4), dtype=torch.long)
    for row, width in enumerate(widths):
        prompts[row, 4 - width:] = torch.arange(10 * row + 1, 10 * row + 1 + width)
        mask[row, 4 - width:] = 1
    return Batch({"input_ids": prompts, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
                 {"index": np.arange(5)})


class Prompts(list):
    pad_token_id = PAD


def validate_check(world) -> dict:
    """Validate 257 prompts on both ranks: each call's prompt indices, and each rank's metrics."""
    dataset = Prompts(PromptItem([1, 2 + i % 3], "stand-in", None, [], index=i) for i in range(257))
    calls: list = []

    def generate(prompts: Batch, params: SamplingParams) -> Batch:
        calls.append([int(index) for index in prompts["index"]])
        return prompts  # one "sample" per prompt: the stand-in's verdict needs only its index

    def reward_manager(rollout: Batch):
        right = [float(int(index) % 2 == 0) for index in rollout["index"]]
        return None, {"acc": right, "score": right}

    metrics = validate(generate, reward_manager, dataset, SamplingParams(n=1), world, batch_size=128)
    return {"validation_calls": all_gather_object(calls), "validation_metrics": all_gather_object(metrics)}


def plain(batch: Batch) -> dict:
    """A batch as torch.load(weights_only=True) reads it back: tensors, and lists for the rest."""
    return {"tensors": dict(batch.tensors),
            "non_tensors": {k: [x.item() if hasattr(x, "item") else x for x in v.tolist()]
                            for k, v in batch.non_tensors.items()}}


def main(out_path: str) -> None:
    world = with_tensor_parallel(init_distributed("cpu"), 2)
    params = SamplingParams(n=2, seed=7, greedy_baseline=True)
    calls: list = []
    gathered = TensorParallelGeneration(world, PAD).generate(lambda b, p: engine_generate(b, p, calls),
                                                             prompt_batch(), params)
    prompts, one_process_calls = prompt_batch(), []
    one_process = concat_rollouts([engine_generate(prompts.select(rows), share_params(params, 2, rank),
                                                   one_process_calls)
                                   for rank, rows in enumerate(prompt_shares(prompts, 2))], PAD)
    result = {"batches": all_gather_object(plain(gathered)), "calls": all_gather_object(calls),
              "one_process": plain(one_process), **validate_check(world)}
    if world.is_main:
        torch.save(result, out_path)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
