"""Validation: generate on held-out prompts, score them, report accuracy per data source.

Each rank takes every world_size-th prompt, the ranks of a tensor-parallel group too (they would otherwise
generate the same prompts twice), in as many engine calls as every other rank (an engine spanning several ranks
pools each call's prompts over them); the scored prompts of all ranks are gathered and summarised by
`core.eval.summary.summarize`, the same code `recipezoo eval` reports with, so a validation figure and an eval
figure of the same model and protocol are the same number.
"""

from __future__ import annotations

import math

import numpy as np

from core.data.dataset import collate_prompts
from core.engine.distributed import World, all_gather_object
from core.eval.summary import PromptResult, summarize
from core.rollout.base import SamplingParams
from core.rollout.multi_turn.episode_metrics import EPISODE_COLUMNS, multi_turn_metrics


def validate(generate, reward_manager, dataset, params: SamplingParams, world: World,
             batch_size: int = 128) -> dict[str, float]:
    """`generate(prompts, params) -> Batch`; returns val/<data_source>/acc, /score (and pass@k for
    n > 1) and val/acc over all prompts."""
    mine = [dataset[i] for i in range(world.rank, len(dataset), world.size)]
    results: list[PromptResult] = []
    episodes: dict[str, list] = {}  # a multi-turn rollout's per-episode columns (turns, tool calls, ...)
    for rows in call_rows(len(mine), len(dataset), world.size, batch_size):
        prompts = collate_prompts([mine[i] for i in rows], dataset.pad_token_id)
        rollout = generate(prompts, params)
        _, info = reward_manager(rollout)
        results += group_by_prompt(list(rollout["data_source"]), info["acc"], info["score"], params.n)
        for key in set(EPISODE_COLUMNS) & rollout.non_tensors.keys():
            episodes.setdefault(key, []).extend(rollout.non_tensors[key])
    gathered = all_gather_object((results, episodes))
    all_results = [result for rank_results, _ in gathered for result in rank_results]
    all_episodes = {key: [value for _, rank_episodes in gathered for value in rank_episodes[key]] for key in episodes}
    tool_metrics = {f"val/{key}": value for key, value in multi_turn_metrics(all_episodes).items()}
    return validation_metrics(summarize(all_results)) | tool_metrics


def call_rows(share: int, total: int, ranks: int, batch_size: int) -> list[np.ndarray]:
    """This rank's `share` prompts (of `total` over `ranks`: shares differ by one at most) in engine calls of
    `batch_size`, and as many calls as the rank with the largest share makes: where that one needs a call more,
    this rank's last call is split in two."""
    calls = math.ceil(math.ceil(total / ranks) / batch_size)
    chunks = [np.arange(start, min(start + batch_size, share)) for start in range(0, share, batch_size)]
    if 0 < len(chunks) < calls:
        chunks[-1:] = np.array_split(chunks[-1], 2)
    return chunks


def group_by_prompt(data_sources: list[str], accs: list[float], scores: list[float], n: int) -> list[PromptResult]:
    """Rollout rows come n per prompt, adjacent (`Batch.repeat(n, interleave=True)`)."""
    return [PromptResult(data_sources[i], list(accs[i:i + n]), list(scores[i:i + n]))
            for i in range(0, len(data_sources), n)]


def validation_metrics(summary: dict[str, dict[str, float]]) -> dict[str, float]:
    metrics = {}
    for source, figures in summary.items():
        if source == "all":
            continue
        n = int(figures["num_samples"] // figures["num_prompts"])
        metrics[f"val/{source}/acc"] = figures[f"mean@{n}"]
        metrics[f"val/{source}/score"] = figures["score"]
        if n > 1:
            metrics.update({f"val/{source}/{key}": value for key, value in figures.items() if key.startswith("pass@")})
    overall = summary.get("all") or next(iter(summary.values()))
    metrics["val/acc"] = overall[f"mean@{int(overall['num_samples'] // overall['num_prompts'])}"]
    return metrics
