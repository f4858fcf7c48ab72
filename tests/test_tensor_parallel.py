"""Tensor parallel (torchrun, gloo) matches one process: TP=2 alone, and dp=2 x tp=2 with FSDP2."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.engine.distributed import build_mesh
from core.engine.tp import check_tensor_parallel_size, parallelize_decoder
from tests.helpers_dist import REPO, run_script

SCRIPT = Path(__file__).parent / "dist" / "tp_check.py"
REL_TOL = 1e-5  # of the largest entry of each tensor: summation order differs across ranks


def _run(nproc: int, out: Path, mode: str) -> dict:
    return run_script(SCRIPT, nproc, out, mode)


def test_tp2_logits_gradients_and_step_equal_one_process(tmp_path):
    result = _run(2, tmp_path / "tp.pt", "tp")
    assert result["grad_names"] == result["ref_names"]
    for name in ("self_attn.q_proj.weight", "self_attn.o_proj.weight", "mlp.down_proj.weight", "self_attn.q_norm"):
        assert any(name in sharded for sharded in result["sharded"]), f"{name} was not tensor-parallel"
    for what in ("logits", "grads", "weights"):
        max_abs, max_rel = result[what]
        assert max_rel < REL_TOL, f"{what}: max abs diff {max_abs:.3g}, relative {max_rel:.3g}"


def test_dp2_tp2_step_equals_one_process_step_on_whole_batch(tmp_path):
    result = _run(4, tmp_path / "2d.pt", "2d")
    assert result["names"] == result["ref_names"]
    assert result["moved"] > 1e-3, "the step did not change the weights; the comparison would be vacuous"
    grad_norm, ref_norm = result["grad_norm"]
    # A gradient averaged over the 4 ranks instead of the 2 dp groups would show here as half the norm.
    assert grad_norm == pytest.approx(ref_norm, rel=REL_TOL)
    max_abs, max_rel = result["weights"]
    assert max_rel < REL_TOL, f"weights after the step: max abs diff {max_abs:.3g}, relative {max_rel:.3g}"


def _tiny_config(**overrides):
    from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config

    return tiny_qwen3_config(build_tiny_tokenizer(), **overrides)


def test_tp_size_that_does_not_split_heads_evenly_names_the_setting():
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM(_tiny_config(num_hidden_layers=1))  # 4 query heads, 2 key/value heads
    with pytest.raises(ValueError, match=r"actor.tensor_parallel_size=3 .*num_attention_heads=4.*\[1, 2\]"):
        # The check comes before any collective, so a mesh that only knows its size is enough.
        parallelize_decoder(model, SimpleNamespace(size=lambda: 3))
    with pytest.raises(ValueError, match=r"actor.tensor_parallel_size=4 .*num_key_value_heads=2"):
        check_tensor_parallel_size(model.config, 4)
    check_tensor_parallel_size(model.config, 2)


def test_world_size_not_divisible_by_tp_size_is_refused():
    with pytest.raises(ValueError, match=r"actor.tensor_parallel_size=3 .*divide the number of training processes \(4\)"):
        build_mesh(4, 3, "cpu")


def test_grpo_step_with_actor_tensor_parallel_2_equals_one_process(fast_overrides, random_model_dir, tmp_path):
    """actor.tensor_parallel_size=2 through the trainer: torchrun, 2 ranks in one dp group, each generating half the
    prompts (core/trainer/tp_generation.py). The one process generates the same two halves with the same seeds, one
    after the other, so the step's batch and so its weights must match."""
    from core.config import load_config
    from core.rollout.base import concat_rollouts
    from core.trainer.tp_generation import prompt_shares, share_params
    from recipes.grpo.trainer import GRPOTrainer

    class HalvesInOneProcess(GRPOTrainer):
        def generate(self, prompts, params=None):
            prompts.non_tensors["uid"] = np.array([f"{i}" for i in prompts["index"]], dtype=object)
            params = params or self.sampling_params()
            halves = [self.actor_rollout.generate(prompts.select(rows), share_params(params, 2, rank))
                      for rank, rows in enumerate(prompt_shares(prompts, 2))]
            return concat_rollouts(halves, self.tokenizer.pad_token_id)

    reward = tmp_path / "varied_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return (sum(map(ord, solution_str)) % 7) / 6  # varies, so the step has a real gradient\n")
    common = [o for o in fast_overrides if not o.startswith(("trainer.output_dir", "trainer.total_steps"))] + [
        "trainer.total_steps=1", "trainer.save_freq=1", f"reward.custom_function.path={reward}", "trainer.num_threads=1"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "core.cli", "train",
         "--recipe", "grpo", *common, "actor.tensor_parallel_size=2", f"trainer.output_dir={tmp_path}/tp"],
        env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    HalvesInOneProcess(load_config("grpo", common + [f"trainer.output_dir={tmp_path}/one"])).fit()
    got = torch.load(tmp_path / "tp/checkpoints/global_step_1/actor/model.pt", weights_only=True)
    expected = torch.load(tmp_path / "one/checkpoints/global_step_1/actor/model.pt", weights_only=True)
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-5, msg=name)
    optimizer = torch.load(tmp_path / "tp/checkpoints/global_step_1/actor/optimizer.pt", weights_only=True)
    assert optimizer["state"], "the 2-D engine saved its AdamW state"
