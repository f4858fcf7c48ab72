"""Every run_qwen3_8b.sh goes through recipes/launch_qwen3_8b.sh and the qwen3_8b preset, and resolves the config
its inline keys gave before the preset existed. The scripts run here with `python` and `torchrun` stubs that
record their arguments, so no trainer starts; the dry runs themselves are in test_dry_run.py and test_recipes.py."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from core.config import load_config

REPO = Path(__file__).resolve().parent.parent
DATA = "/data/gsm8k"  # only composed, never read

# The keys each script passed on its command line before the preset (commit 662e45a), verbatim.
BEFORE_COMMON = (f"model.path=Qwen/Qwen3-8B data.train_files={DATA}/train.parquet data.val_files={DATA}/test.parquet "
                 "data.val_max_samples=null data.max_prompt_length=512 rollout.name=vllm rollout.enforce_eager=false "
                 "actor.lr=1e-6 actor.entropy_coeff=0 actor.gradient_checkpointing=true trainer.nnodes=1 "
                 "trainer.n_gpus_per_node=8 trainer.test_freq=5")
GRPO_BEFORE = ("data.train_batch_size=1024 data.max_response_length=1024 rollout.n=5 actor.ppo_mini_batch_size=256 "
               "actor.micro_batch_size=32 trainer.total_steps=105")
BEFORE = {
    "grpo/run_qwen3_8b": ("grpo", f"{GRPO_BEFORE} tracking.run_name=grpo-qwen3-8b"),
    "grpo/run_qwen3_8b_gspo": ("recipes/grpo/gspo.yaml", f"{GRPO_BEFORE} tracking.run_name=gspo-qwen3-8b"),
    "grpo/run_qwen3_8b_cispo": ("recipes/grpo/cispo.yaml", f"{GRPO_BEFORE} tracking.run_name=cispo-qwen3-8b"),
    "dapo/run_qwen3_8b": ("dapo", "data.train_batch_size=512 data.max_response_length=2048 rollout.n=16 "
                          "actor.ppo_mini_batch_size=32 actor.micro_batch_size=16 actor.clip_ratio_low=0.2 "
                          "actor.clip_ratio_high=0.28 actor.clip_ratio_c=10.0 actor.loss_agg_mode=token-mean "
                          "actor.use_kl_loss=false algorithm.use_kl_in_reward=false algorithm.filter_groups.enable=true "
                          "algorithm.filter_groups.max_num_gen_batches=10 reward.overlong_buffer.enable=true "
                          "reward.overlong_buffer.len=512 reward.overlong_buffer.penalty_factor=1.0 "
                          "trainer.total_steps=100 tracking.run_name=dapo-qwen3-8b"),
    "ppo/run_qwen3_8b": ("ppo", "data.train_batch_size=1024 data.max_response_length=1024 rollout.n=1 "
                         "actor.ppo_mini_batch_size=256 actor.micro_batch_size=16 actor.use_kl_loss=false critic.lr=1e-5 "
                         "critic.micro_batch_size=16 algorithm.adv_estimator=gae algorithm.use_kl_in_reward=false "
                         "trainer.critic_warmup=0 trainer.total_steps=105 tracking.run_name=ppo-qwen3-8b"),
    "remax/run_qwen3_8b": ("remax", "data.train_batch_size=512 data.max_response_length=1024 rollout.n=4 "
                           "actor.ppo_mini_batch_size=128 actor.micro_batch_size=32 actor.use_kl_loss=false "
                           "algorithm.use_kl_in_reward=true algorithm.kl_penalty=k1 algorithm.kl_coef=0.001 "
                           "trainer.total_steps=70 tracking.run_name=remax-qwen3-8b"),
    "rloo/run_qwen3_8b": ("rloo", "data.train_batch_size=1024 data.max_response_length=1024 rollout.n=5 "
                          "actor.ppo_mini_batch_size=256 actor.micro_batch_size=32 actor.use_kl_loss=false "
                          "algorithm.use_kl_in_reward=true algorithm.kl_penalty=k1 algorithm.kl_coef=0.001 "
                          "trainer.total_steps=105 tracking.run_name=rloo-qwen3-8b"),
}


def launched(tmp_path: Path, script: str, *args: str, **env: str) -> list[str]:
    """What `bash recipes/<script>.sh ARGS` execs (stubs stand in for python and torchrun), as argv."""
    stubs, record = tmp_path / "bin", tmp_path / "argv"
    stubs.mkdir(exist_ok=True)
    for name in ("python", "torchrun"):
        (stubs / name).write_text(f'#!/usr/bin/env bash\nprintf "%s\\0" {name} "$@" > "{record}"\n')
        (stubs / name).chmod(0o755)
    # The launcher's knobs come from this test only, not from the shell that runs it; run from tmp_path.
    clean = {k: v for k, v in os.environ.items() if k not in ("RECIPE", "RUN_NAME", "NGPUS", "PWD")}
    subprocess.run(["bash", str(REPO / "recipes" / f"{script}.sh"), *args], check=True, timeout=60, cwd=tmp_path,
                   env={**clean, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}", "DATA": DATA, **env})
    return record.read_text().split("\0")[:-1]


def resolved(recipe: str, overrides: list[str]) -> dict:
    return OmegaConf.to_container(load_config(recipe, overrides), resolve=True)


@pytest.mark.parametrize("script", sorted(BEFORE))
def test_each_run_qwen3_8b_resolves_the_config_its_inline_keys_gave(tmp_path, script):
    argv = launched(tmp_path, script)
    at = argv.index("--recipe")
    recipe, before = BEFORE[script]
    assert argv[at + 1] == recipe and "+presets=qwen3_8b" in argv
    assert resolved(recipe, argv[at + 2:]) == resolved(recipe, shlex.split(f"{BEFORE_COMMON} {before}"))


@pytest.mark.parametrize("args, launcher", [
    ((), ["torchrun", "--nnodes=1", "--nproc_per_node=4"]),  # one rank per GPU of this node
    (("trainer.controller=ray",), ["python"]),  # one driver; Ray places the workers
    (("--dry-run",), ["python"]),
    (("trainer.dry_run=true",), ["python"]),
])
def test_the_launcher_starts_a_rank_per_gpu_unless_ray_or_a_dry_run(tmp_path, args, launcher):
    argv = launched(tmp_path, "dapo/run_qwen3_8b", *args, NGPUS="4")
    assert argv[:len(launcher) + 2] == [*launcher, "-m", "core.cli"]
    assert "trainer.n_gpus_per_node=4" in argv and argv[len(argv) - len(args):] == list(args)  # the user's last


def test_a_relative_data_dir_is_the_callers_not_the_repo_roots(tmp_path):
    argv = launched(tmp_path, "rloo/run_qwen3_8b", DATA="gsm8k")
    assert f"data.train_files={tmp_path.resolve() / 'gsm8k'}/train.parquet" in argv
