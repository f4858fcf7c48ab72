"""Validation: generate on held-out prompts, score them, report accuracy per data source.

Each rank takes every world_size-th prompt; correct counts are summed over ranks, so the
figure is over the whole validation set whatever the number of ranks.
"""

from __future__ import annotations

from collections import defaultdict

from core.data.dataset import collate_prompts
from core.engine.distributed import World, all_reduce_sum
from core.rollout.base import SamplingParams


def validate(generate, reward_manager, dataset, params: SamplingParams, world: World,
             batch_size: int = 128) -> dict[str, float]:
    """`generate(prompts, params) -> Batch`; returns val/<data_source>/acc, /score and val/acc."""
    mine = [dataset[i] for i in range(world.rank, len(dataset), world.size)]
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])  # acc, score, count
    for start in range(0, len(mine), batch_size):
        prompts = collate_prompts(mine[start:start + batch_size], dataset.pad_token_id)
        rollout = generate(prompts, params)
        _, info = reward_manager(rollout)
        for source, acc, score in zip(rollout["data_source"], info["acc"], info["score"]):
            sums[source][0] += acc
            sums[source][1] += score
            sums[source][2] += 1
    metrics, total_acc, total_count = {}, 0.0, 0.0
    # Sorted so every rank joins the same all-reduces in the same order.
    for source in sorted(set(dataset_sources(dataset))):
        acc, score, count = (all_reduce_sum(v, world.device) for v in sums[source])
        metrics[f"val/{source}/acc"] = acc / max(count, 1)
        metrics[f"val/{source}/score"] = score / max(count, 1)
        total_acc, total_count = total_acc + acc, total_count + count
    metrics["val/acc"] = total_acc / max(total_count, 1)
    return metrics


def dataset_sources(dataset) -> list[str]:
    return [dataset[i].data_source for i in range(len(dataset))]
