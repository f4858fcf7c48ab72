"""Several reward sources in one `token_level_scores`: the rule scorer, a reward model, an LLM judge.

Each source gives one score per response; their weighted sum (`reward.weights`) is placed on the last response
token, as a rule score alone is. A source is on when it is configured (the rule always; `reward.model.path`;
`reward.judge.enable`), and every source that is on needs a weight > 0, every one that is off a weight of 0:
a configured model whose score is thrown away, or a weight for a source that is not there, is a config
mistake, refused before any engine starts.
"""

from __future__ import annotations

import torch

from core.config import ConfigError

SOURCES = ("rule", "model", "judge")


def enabled_sources(reward_cfg) -> list[str]:
    """The sources `reward_cfg` turns on, in SOURCES order."""
    # Indexed, not dotted: the config check hands a plain dict, the trainer an OmegaConf one.
    on = {"rule": True, "model": bool(reward_cfg["model"]["path"]), "judge": bool(reward_cfg["judge"]["enable"])}
    return [source for source in SOURCES if on[source]]


def source_weights(reward_cfg) -> dict[str, float]:
    """source -> weight for each source that is on; a ConfigError naming the key when the weights and the
    sources do not match."""
    weights, sources = reward_cfg["weights"], enabled_sources(reward_cfg)
    unknown = sorted(set(weights) - set(SOURCES))
    if unknown:
        raise ConfigError(f"reward.weights has {unknown}: the reward sources are {list(SOURCES)}")
    switch = {"model": "reward.model.path", "judge": "reward.judge.enable"}
    for source in SOURCES:
        weight = float(weights.get(source, 0.0))
        if weight < 0:
            raise ConfigError(f"reward.weights.{source}={weight:g}: a weight must be ≥ 0")
        if source in sources and weight == 0 and source != "rule":
            raise ConfigError(f"{switch[source]} is set but reward.weights.{source}=0: its score would be computed "
                              f"and thrown away; give it a weight > 0 (e.g. reward.weights.{source}=1.0)")
        if source not in sources and weight != 0:
            raise ConfigError(f"reward.weights.{source}={weight:g} but {switch[source]} is off: the sources are "
                              f"{sources}; set {switch[source]} or reward.weights.{source}=0")
    if not any(float(weights.get(source, 0.0)) for source in sources):
        raise ConfigError(f"reward.weights are all 0 for the sources {sources}: nothing would reward the policy")
    return {source: float(weights.get(source, 0.0)) for source in sources}


def mix_scores(scores: dict[str, torch.Tensor], weights: dict[str, float]) -> torch.Tensor:
    """(B,) Σ_source weight · score; `scores` must hold exactly the weighted sources."""
    if set(scores) != set(weights):
        raise ValueError(f"mix_scores: scores for {sorted(scores)}, weights for {sorted(weights)}")
    return sum(weights[source] * scores[source].float() for source in weights)


def source_metrics(scores: dict[str, torch.Tensor]) -> dict[str, float]:
    """reward/<source>/mean, min and max per source, so a run shows what each one contributed."""
    metrics = {}
    for source, values in scores.items():
        values = values.float()
        metrics |= {f"reward/{source}/mean": values.mean().item(), f"reward/{source}/max": values.max().item(),
                    f"reward/{source}/min": values.min().item()}
    return metrics
