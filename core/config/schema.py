"""The schema of base.yaml beyond its defaults: the kinds of value a key takes and the range it must lie in.

Types come from base.yaml: a key whose default is an integer takes an integer, a float default takes any number,
and so on. Only the keys whose default cannot tell (null defaults, keys that take two kinds of value) are listed in
`KINDS_BEYOND_DEFAULT`. They sit here, at the bottom with the loader, because two readers need them: the check
before a run (core/trainer/config_checks.py) and the config reference page (reference.py).
"""

from __future__ import annotations

KINDS = {  # kind -> (how an error names it, the test)
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "number": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "dict": ("a mapping", lambda v: isinstance(v, dict)),
    "null": ("null", lambda v: v is None),
}
KINDS_BEYOND_DEFAULT = {
    "model.gguf_file": ("str", "null"),
    "critic.model_path": ("str", "null"),
    "tracking.uri": ("str", "null"),
    "reward.custom_function.path": ("str", "null"),
    "trainer.resume": ("str", "null"),  # disable | auto | a checkpoint path
    "data.val_max_samples": ("int", "null"),  # null = all
    "actor.micro_batch_tokens": ("int", "null"),
    "actor.checkpoint_layers": ("int", "null"),  # null = every layer
    "rollout.max_model_len": ("int", "null"),
    "data.train_files": ("str", "list"),  # one file or a list of them
    "data.val_files": ("str", "list"),
    "tracking.backends": ("str", "list"),  # a bare name is a one-element list
    "actor.remove_padding": ("str", "bool"),  # auto | true | false
    "actor.compile_layers": ("str", "bool"),
    "actor.lora.rank": ("int", "null"),  # null = off
    "actor.lora.target_modules": ("str", "list"),  # all-linear or module names
    "trainer.stream_groups": ("int", "null"),  # null = whole batches
    "trainer.max_staleness": ("int", "null"),  # null = async's default bound
    "trainer.save_batch_step": ("int", "null"),  # null = never
    "rollout.multi_turn.env": ("str", "null"),  # null = function tools
    "reward.model.path": ("str", "null"),  # null = no reward model
    "reward.model.micro_batch_tokens": ("int", "null"),
    "reward.judge.model_path": ("str", "null"),  # null = the policy's model
    "reward.judge.rollout_name": ("str", "null"),  # null = rollout.name
    "data.response_key": ("str", "null"),  # null = chat messages (data.messages_key)
}
RANGES = {  # key -> the valid range, as the error states it
    **dict.fromkeys([
        "data.train_batch_size", "data.max_prompt_length", "data.max_response_length", "data.val_max_samples",
        "rollout.n", "rollout.val_n", "rollout.tensor_model_parallel_size", "rollout.max_model_len",
        "actor.ppo_mini_batch_size", "actor.ppo_epochs", "actor.micro_batch_size", "actor.micro_batch_tokens",
        "actor.checkpoint_layers",
        "actor.logprob_chunk_tokens", "actor.tensor_parallel_size", "critic.ppo_epochs", "critic.micro_batch_size",
        "reward.num_workers", "trainer.total_steps",
        "trainer.nnodes", "trainer.n_gpus_per_node", "trainer.max_staleness", "trainer.rollout_workers",
        "trainer.partial_rollout_chunk", "trainer.stream_groups", "trainer.save_batch_step",
        "rollout.multi_turn.max_turns", "rollout.multi_turn.max_tool_response_chars",
        "rollout.multi_turn.max_concurrent_tools", "reward.model.micro_batch_size", "reward.model.micro_batch_tokens",
        "reward.model.num_workers", "reward.judge.max_new_tokens", "reward.judge.batch_size"], "≥ 1"),
    **dict.fromkeys([  # 0 means off, all, or the library's default
        "rollout.temperature", "rollout.val_temperature", "rollout.top_k", "rollout.micro_batch_size",
        "actor.warmup_steps", "actor.weight_decay", "actor.clip_ratio_low", "actor.clip_ratio_high",
        "actor.kl_loss_coef", "actor.kl_cov_coef", "critic.warmup_steps", "critic.weight_decay",
        "critic.cliprange_value", "algorithm.kl_coef", "algorithm.rollout_correction.mask_low",
        "reward.overlong_buffer.len", "trainer.test_freq", "trainer.save_freq",
        "trainer.max_ckpt_to_keep", "trainer.critic_warmup", "trainer.num_threads", "trainer.seed",
        "trainer.max_bad_steps", "algorithm.filter_groups.max_num_gen_batches", "reward.weights.rule",
        "reward.weights.model", "reward.weights.judge"], "≥ 0"),
    **dict.fromkeys(["actor.lr", "critic.lr", "reward.timeout_s", "rollout.multi_turn.tool_timeout_s",
                     "actor.lora.alpha", "rollout.weight_bucket_mb",
                     "algorithm.rollout_correction.tis_cap", "algorithm.rollout_correction.mask_high"], "> 0"),
    "actor.lora.dropout": "in [0, 1)",
    **dict.fromkeys(["rollout.top_p", "rollout.gpu_memory_utilization", "reward.judge.gpu_memory_utilization"],
                    "in (0, 1]"),
    **dict.fromkeys(["algorithm.gamma", "algorithm.lam", "reward.max_error_frac"], "in [0, 1]"),
    **dict.fromkeys(["actor.clip_cov_ratio", "actor.kl_cov_ratio"], "in (0, 1)"),
}
RANGE_TESTS = {"≥ 1": lambda v: v >= 1, "≥ 0": lambda v: v >= 0, "> 0": lambda v: v > 0,
               "in (0, 1]": lambda v: 0 < v <= 1, "in [0, 1]": lambda v: 0 <= v <= 1, "in [0, 1)": lambda v: 0 <= v < 1,
               "in (0, 1)": lambda v: 0 < v < 1}
