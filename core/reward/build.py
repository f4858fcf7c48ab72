"""Build the reward manager a run's `reward:` config section asks for."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from core.reward import gsm8k, mathverify
from core.reward.custom import CustomFunction, load_custom_function
from core.reward.gsm8k import GSM8K_METHODS
from core.reward.manager import GSM8K_SOURCES, RewardManager
from core.reward.pool import PoolRewardManager

MANAGERS = ("naive", "pool")


def build_reward_manager(reward_cfg, tokenizer) -> RewardManager:
    """`reward.manager` naive (in-process) or pool (worker processes, `reward.timeout_s` per sample)."""
    kind, method = reward_cfg.manager, reward_cfg.gsm8k_method
    if kind not in MANAGERS:
        raise ValueError(f"reward.manager={kind!r}: choose one of {list(MANAGERS)}")
    if method not in GSM8K_METHODS:
        raise ValueError(f"reward.gsm8k_method={method!r}: choose one of {list(GSM8K_METHODS)}")
    # A partial of a module-level function stays picklable for the pool's workers.
    if method == "math_verify":
        gsm8k_scorer = partial(mathverify.compute_score, format_score=float(reward_cfg.format_score))
    else:
        gsm8k_scorer = partial(gsm8k.compute_score, method=method, format_score=float(reward_cfg.format_score))
    scorers = {source: gsm8k_scorer for source in GSM8K_SOURCES}
    custom = custom_function(reward_cfg.custom_function)
    if kind == "naive":
        return RewardManager(tokenizer, scorers=scorers, custom_scorer=custom)
    return PoolRewardManager(tokenizer, scorers=scorers, custom_scorer=custom,
                             num_workers=int(reward_cfg.num_workers), timeout_s=float(reward_cfg.timeout_s))


def custom_function(custom_cfg) -> CustomFunction | None:
    """The configured custom function, loaded once here so a broken file fails at start-up."""
    if not custom_cfg.path:
        return None
    path = str(Path(custom_cfg.path).expanduser().resolve())  # workers may not share the working directory
    load_custom_function(path, custom_cfg.name)
    return CustomFunction(path, custom_cfg.name)
