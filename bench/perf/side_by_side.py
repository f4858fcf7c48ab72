"""Ours, verl and TRL doing the same GRPO step on one GPU, at two shapes: what each framework is asked to run.

    python -m bench.perf.side_by_side_run --shape 0.6b --model-dir DIR --data train.parquet --steps 4 \
        --ours-python PY --verl-python PY --trl-python PY --out results/perf       (bash bench/perf/side_by_side.sh)

A shape is the work of one step, the same for all three: its prompts × samples, prompt and response lengths, one
AdamW step per rollout (lr 1e-6, no weight decay, grad clip 1.0), PPO clip 0.2, token-mean loss, no KL, sampling
at temperature 1, vLLM colocated at 40% of the GPU, and bench/common/varied_reward.py as the reward (random weights
score 0 on GSM8K, which would leave every advantage 0 and the weights unchanged; this reward varies within each
group, so every update changes the weights the engine must receive). The models are random-init from
bench/configs/ (bench/common/random_model.py): fine for speed, nothing about quality.

Each framework runs at its best documented settings:
- ours: bench/common/grpo_vllm_gpu.py; packing and token-budget micro-batches, compiled decoder layers (defaults on
  CUDA), CUDA graphs, the engine asleep through the update; activation checkpointing of only as many layers as the
  memory plan (core/trainer/memory_estimate.py) needs to keep the GPU under 95% (`plan_checkpoint_layers`).
- verl 0.9.1: bench/verl/grpo_gpu.py's shape (sequence packing through flash-attn where it imports, dynamic batch
  size by token budget, vLLM's CUDA graphs, FSDP2), with the engine's log-probs on so that it reports its drift.
- TRL: bench/perf/trl_grpo_gpu.py, GRPOTrainer with its colocated vLLM and sleep mode, Liger kernels where
  liger-kernel imports, gradient checkpointing (TRL's default) at the shape that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIED_REWARD = ROOT / "bench/common/varied_reward.py"
PEAK_TARGET = 0.95
H200_GIB = 140.4  # nvidia-smi's memory.total of an H200 (bench/scale/plan.py's DEVICES)


@dataclass(frozen=True)
class Shape:
    """One step's work. `verl_shape` names bench/verl/grpo_gpu.py's SHAPES entry that encodes the same work."""
    name: str
    config: str  # bench/configs/<config>
    prompts: int
    n: int
    max_prompt_length: int
    max_response_length: int
    verl_shape: str
    micro_batch_tokens: int = 16384  # ours' actor.micro_batch_tokens = verl's ppo_max_token_len_per_gpu
    trl_micro_batch: int = 16  # TRL's per_device_train_batch_size: completions per forward/backward
    trl_gradient_checkpointing: bool = False
    lr: float = 1e-6
    clip: float = 0.2
    gpu_memory_utilization: float = 0.4

    @property
    def title(self) -> str:
        return (f"Qwen3-{self.name.upper().removesuffix('B')}B, {self.prompts} prompts × {self.n}, responses up to "
                f"{self.max_response_length} tokens, 1 GPU")


SHAPES = {
    "0.6b": Shape("0.6b", "qwen3-0.6b", 32, 8, 384, 512, verl_shape="grpo"),
    # Every weight trained: 64 GB of fp32 weights, gradients and AdamW moments before any activation.
    "4b": Shape("4b", "qwen3-4b", 32, 8, 384, 1024, verl_shape="grpo4b", trl_gradient_checkpointing=True),
}
FRAMEWORKS = ("ours", "verl", "trl")


def ours_overrides(shape: Shape) -> list[str]:
    """bench/common/grpo_vllm_gpu.py's config overrides for the shape's work (before the checkpointing plan)."""
    return [
        f"data.train_batch_size={shape.prompts}", f"rollout.n={shape.n}",
        f"data.max_prompt_length={shape.max_prompt_length}", f"data.max_response_length={shape.max_response_length}",
        f"actor.ppo_mini_batch_size={shape.prompts}", f"actor.lr={shape.lr}", "actor.weight_decay=0.0",
        "actor.use_kl_loss=false", "actor.entropy_coeff=0", "actor.loss_agg_mode=token-mean", "actor.grad_clip=1.0",
        f"actor.clip_ratio_low={shape.clip}", f"actor.clip_ratio_high={shape.clip}", "actor.clip_ratio_c=3.0",
        f"actor.micro_batch_tokens={shape.micro_batch_tokens}", "rollout.temperature=1.0", "rollout.top_p=1.0",
        f"rollout.gpu_memory_utilization={shape.gpu_memory_utilization}", "rollout.enforce_eager=false",
        "rollout.calculate_log_probs=true", "trainer.device=cuda",
        f"reward.custom_function.path={VARIED_REWARD}", "reward.custom_function.name=compute_score",
    ]


def plan_checkpoint_layers(shape: Shape, device_gib: float = H200_GIB) -> int:
    """The fewest decoder layers to checkpoint (the first N, actor.checkpoint_layers) for which the memory plan
    (`per_gpu_memory`, as the dry run and the launch check count it) keeps both phases under PEAK_TARGET of the
    device; the model's layer count when even all of them do not (the run then fails its own launch check)."""
    from core.config import load_config
    from core.trainer.memory_estimate import GIB, ModelShape, count_parameters, per_gpu_memory

    model = str(ROOT / "bench/configs" / shape.config)
    decoder, params = ModelShape.from_pretrained(model), count_parameters(model)
    for layers in range(decoder.layers + 1):
        config = load_config("grpo", [f"model.path={model}", "model.init=random", *ours_overrides(shape),
                                      *checkpoint_overrides(layers)])
        found = per_gpu_memory(config, decoder, params, 1, device_gib * GIB, with_reference=False, with_critic=False)
        if found["peak"] <= PEAK_TARGET * device_gib * GIB:
            return layers
    return decoder.layers


def checkpoint_overrides(layers: int) -> list[str]:
    """Activation checkpointing of the first `layers` decoder layers; none at 0."""
    if layers == 0:
        return ["actor.gradient_checkpointing=false"]
    return ["actor.gradient_checkpointing=true", f"actor.checkpoint_layers={layers}"]


def ours_command(shape: Shape, python: str, model_dir: str, data: str, steps: int, out: Path,
                 checkpoint_layers: int) -> list[str]:
    return [python, "-m", "bench.common.grpo_vllm_gpu", "--model-dir", model_dir, "--data", data,
            "--steps", str(steps), "--out", str(out), *ours_overrides(shape), *checkpoint_overrides(checkpoint_layers),
            f"trainer.output_dir={out / 'trainer'}"]


def verl_extra(shape: Shape) -> list[str]:
    """What the side by side adds to bench/verl/grpo_gpu.py's shape: the varied reward, the engine's log-probs
    (verl then logs its rollout/actor drift, training/rollout_probs_diff_*)."""
    return [f"reward.custom_reward_function.path={VARIED_REWARD}", "reward.custom_reward_function.name=compute_score",
            "actor_rollout_ref.rollout.calculate_log_probs=true"]


def verl_command(shape: Shape, python: str, model_dir: str, data: str, steps: int, out: Path,
                 timeout_s: int) -> list[str]:
    return [python, "-m", "bench.verl.grpo_gpu", "--shape", shape.verl_shape, "--model-dir", model_dir,
            "--data", data, "--steps", str(steps), "--timeout-s", str(timeout_s), "--packing", "auto",
            "--out", str(out), *verl_extra(shape)]


def trl_command(shape: Shape, python: str, model_dir: str, data: str, steps: int, out: Path) -> list[str]:
    command = [python, "-m", "bench.perf.trl_grpo_gpu", "--model-dir", model_dir, "--data", data,
               "--steps", str(steps), "--prompts-per-step", str(shape.prompts), "--n", str(shape.n),
               "--micro-batch", str(shape.trl_micro_batch), "--max-prompt-len", str(shape.max_prompt_length),
               "--max-response-len", str(shape.max_response_length), "--lr", str(shape.lr),
               "--gpu-memory-utilization", str(shape.gpu_memory_utilization), "--reward", "varied", "--liger", "auto",
               "--out", str(out)]
    return command + (["--gradient-checkpointing"] if shape.trl_gradient_checkpointing else [])
