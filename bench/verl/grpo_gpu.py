"""verl's own trainer doing the work of one of our timed steps, each step timed, for a side-by-side table.

    python -m bench.verl.grpo_gpu --shape grpo --model-dir DIR --data train.parquet --steps 4 --out /tmp/verl_grpo

(OUT also gets verl's log, metrics and Hydra dirs; bench/verl/suite.sh copies OUT/verl.json into results/perf/.)

Runs `python -m verl.trainer.main_ppo` (verl 0.9.1: FSDP2 actor, vLLM rollout colocated on the same GPUs, its
sync trainer) in verl's own environment (bench/requirements-verl.txt), never ours. Three shapes:

- `grpo`, 1 GPU: our end-to-end step of bench/perf/e2e_suite.sh. Qwen3-0.6B, 32 GSM8K prompts × 8, ≤ 384 prompt
  and 512 response tokens, temperature 1, one AdamW step per rollout (lr 1e-6, no weight decay, grad clip 1.0),
  clip 0.2, dual-clip 3, token-mean loss, no KL, vLLM at 40% of the GPU with CUDA graphs.
- `grpo4b`, 1 GPU: bench/perf/side_by_side.py's larger shape. Qwen3-4B, 32 prompts × 8, ≤ 384 prompt and 1024
  response tokens, otherwise as `grpo`, with gradient checkpointing.
- `dapo8b`, 2 GPUs: the DAPO step of bench/scale/suite.py at 2 GPUs. Qwen3-8B, 16 prompts × 16, ≤ 512 prompt and
  2048 response tokens, two optimizer steps per rollout, clip 0.2/0.28, dual-clip 10, token-mean, no KL, dynamic
  sampling, overlong buffer 512, gradient checkpointing, bench/common/varied_reward.py as the reward.

verl runs with the speed settings its performance tuning guide recommends (SPEED_SETTINGS, token_budgets), sequence
packing included where flash-attn imports (`--packing auto`; `--packing off`: padded, as the first side-by-side
ran). The model dir must be
an HF checkpoint (verl loads its weights): bench/common/random_model.py writes a random-init one from a config dir.
Writes OUT/verl.json: the composed verl config, verl's per-step metrics (`timing_s/*`, `perf/*`, as verl's file
logger writes them: the same per-step schema as bench/common/grpo_vllm_gpu.py's grpo.json), each GPU's peak memory from
nvidia-smi, and, when verl fails, its exit code and the end of its log. Extra arguments are verl overrides.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from bench.common.gpu_memory import PeakMemoryMonitor, device_name, stop_process_tree

ROOT = Path(__file__).resolve().parents[2]
ACTOR, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
# verl's performance tuning guide: sequence packing, micro-batches by token count instead of by row count,
# vLLM's CUDA graphs, vLLM's memory freed during training; FSDP2. The token budgets are per shape (SHAPES).
SPEED_SETTINGS = [
    "actor_rollout_ref.model.use_remove_padding=true",
    f"{ACTOR}.use_dynamic_bsz=true",
    f"{ROLLOUT}.enforce_eager=false",
    f"{ROLLOUT}.free_cache_engine=true",
    f"{ACTOR}.strategy=fsdp2",
]
# verl packs sequences only through flash-attention 2's varlen kernels. `--packing off` (or auto without flash-attn:
# PyPI has it as source only, bench/verl/build_flash_attn.sh builds it) runs verl padded, with PyTorch's SDPA: not verl
# at its best, kept so that the first side-by-side's numbers stay reproducible; the report lists both settings.
WITHOUT_FLASH_ATTN = ["actor_rollout_ref.model.use_remove_padding=false",
                      "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"]
# What every shape shares with our GRPO-family steps: GRPO advantages, no KL anywhere, token-mean loss, one
# pass over the batch, AdamW at lr 1e-6 with grad clip 1.0, sampling at temperature 1, one vLLM engine per GPU.
COMMON = [
    "algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=true", "algorithm.use_kl_in_reward=false",
    f"{ACTOR}.use_kl_loss=false", f"{ACTOR}.entropy_coeff=0", f"{ACTOR}.loss_agg_mode=token-mean",
    f"{ACTOR}.ppo_epochs=1", f"{ACTOR}.optim.lr=1e-6", f"{ACTOR}.optim.lr_warmup_steps=0",
    f"{ACTOR}.optim.clip_grad=1.0", f"{ACTOR}.grad_clip=1.0", f"{ROLLOUT}.name=vllm",
    f"{ROLLOUT}.tensor_model_parallel_size=1", f"{ROLLOUT}.temperature=1.0", f"{ROLLOUT}.top_p=1.0",
    f"{ROLLOUT}.top_k=-1",
]


def one_gpu_grpo(response_length: int, gradient_checkpointing: bool) -> list[str]:
    """The single-GPU GRPO shapes' overrides: 32 prompts × 8, one optimizer step per rollout."""
    return [
        "data.train_batch_size=32", "data.max_prompt_length=384", f"data.max_response_length={response_length}",
        f"{ROLLOUT}.n=8", f"{ACTOR}.ppo_mini_batch_size=32",
        f"{ACTOR}.optim.weight_decay=0.0", f"{ACTOR}.clip_ratio_low=0.2", f"{ACTOR}.clip_ratio_high=0.2",
        f"{ACTOR}.clip_ratio_c=3.0",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={str(gradient_checkpointing).lower()}",
        f"{ROLLOUT}.gpu_memory_utilization=0.4",
    ]


# Token budgets per GPU (`max_tokens`): verl's guide asks for ppo_max_token_len_per_gpu of at least 2 × (prompt +
# response length) and as large as memory allows, and lets forward-only passes take more than the update (here 2×).
# 16384 is our `actor.micro_batch_tokens` at the grpo shape, so both frameworks get the same micro-batch size;
# at dapo8b it is 3.2× the guide's floor (2 × (512 + 2048) = 5120); the padded run at this budget fit 2 H200s.
SHAPES = {
    "grpo": {"gpus": 1, "max_tokens": 16384, "overrides": one_gpu_grpo(512, gradient_checkpointing=False)},
    # The larger single-GPU shape of bench/perf/side_by_side.py: Qwen3-4B, every weight trained, responses up to
    # 1024 tokens; gradient checkpointing as verl's Qwen3-4B/8B GRPO examples set it (the fp32 state alone is 64 GB).
    "grpo4b": {"gpus": 1, "max_tokens": 16384, "overrides": one_gpu_grpo(1024, gradient_checkpointing=True)},
    "dapo8b": {"gpus": 2, "max_tokens": 16384, "overrides": [
        "data.train_batch_size=16", "data.max_prompt_length=512", "data.max_response_length=2048",
        f"{ROLLOUT}.n=16", f"{ACTOR}.ppo_mini_batch_size=8",  # two optimizer steps per rollout
        f"{ACTOR}.optim.weight_decay=0.01", f"{ACTOR}.clip_ratio_low=0.2", f"{ACTOR}.clip_ratio_high=0.28",
        f"{ACTOR}.clip_ratio_c=10.0", "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        f"{ROLLOUT}.gpu_memory_utilization=0.35",
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward",
        "reward.reward_manager.name=dapo", "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
        "+reward.reward_kwargs.overlong_buffer_cfg.len=512",
        "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
        "+reward.reward_kwargs.overlong_buffer_cfg.log=false", "+reward.reward_kwargs.max_resp_len=2048",
        f"reward.custom_reward_function.path={ROOT / 'bench/common/varied_reward.py'}",
        "reward.custom_reward_function.name=compute_score",
    ]},
}
# Per-step metrics kept from verl's log: stage times, throughput and memory, and what shows the work was done.
KEPT_PREFIXES = ("timing_s/", "perf/", "response_length/", "prompt_length/", "actor/grad_norm", "actor/pg_clipfrac",
                 "critic/score/mean", "training/")


def token_budgets(shape: str) -> list[str]:
    """The update's and the forward-only log-prob pass's token budgets per GPU (verl's dynamic batch sizes)."""
    tokens = SHAPES[shape]["max_tokens"]
    return [f"{ACTOR}.ppo_max_token_len_per_gpu={tokens}", f"{ROLLOUT}.log_prob_max_token_len_per_gpu={2 * tokens}"]


def verl_overrides(shape: str, model_dir: str, data: str, steps: int, out: Path, extra: list[str]) -> list[str]:
    """main_ppo's command-line overrides: the run's inputs, the shape's work, verl's speed settings, then `extra`."""
    gpus = SHAPES[shape]["gpus"]
    run = [
        f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={data}", f"data.val_files={data}",
        f"trainer.n_gpus_per_node={gpus}", "trainer.nnodes=1", f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1",
        "trainer.logger=[console,file]", "trainer.project_name=recipezoo-bench", f"trainer.experiment_name=verl-{shape}",
        f"trainer.default_local_dir={out / 'checkpoints'}",
    ]
    return run + COMMON + SHAPES[shape]["overrides"] + SPEED_SETTINGS + token_budgets(shape) + extra


def packing_on(packing: str) -> bool:
    """Whether verl packs: `on` needs flash-attn (refused in one line without it), `auto` follows it."""
    installed = importlib.util.find_spec("flash_attn_2_cuda") is not None  # the built kernels, not the python part
    if packing == "on" and not installed:
        raise SystemExit("--packing on needs flash-attn in verl's environment: bash bench/verl/build_flash_attn.sh "
                         "--python $(which python) --wheel-dir DIR, then python -m bench.verl.flash_attn_check")
    if packing == "auto" and not installed:
        print("flash-attn is not installed: verl runs without sequence packing, with SDPA (not at its best)", flush=True)
    return packing != "off" and installed


def verl_config_dir() -> Path:
    """verl's Hydra config dir, found without importing verl (its import pulls in torch, Ray and CUDA checks)."""
    spec = importlib.util.find_spec("verl")
    if spec is None:
        raise SystemExit("verl is not installed here: run this in verl's environment (bench/requirements-verl.txt)")
    return Path(spec.submodule_search_locations[0]) / "trainer" / "config"


def compose(overrides: list[str]) -> dict:
    """The config main_ppo will run, composed by Hydra from verl's own ppo_trainer.yaml: a wrong key fails here."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        config = hydra_compose("ppo_trainer", overrides=overrides)
    return OmegaConf.to_container(config, resolve=True)


def read_steps(path: Path) -> list[dict]:
    """verl's file logger writes one {"step", "data"} line per step; keep the timing, throughput and memory keys."""
    steps = []
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        kept = {k: v for k, v in record["data"].items() if k.startswith(KEPT_PREFIXES) and isinstance(v, int | float)}
        if "timing_s/step" in kept:
            steps.append({"step": record["step"], **kept})
    return steps


def versions() -> dict:
    found = {}
    for name in ("verl", "vllm", "torch", "transformers", "flash-attn", "ray"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def run_verl(overrides: list[str], out: Path, timeout_s: int, on_step=None) -> dict:
    """main_ppo under the nvidia-smi memory monitor; its metrics land in OUT/verl_metrics.jsonl. `on_step(result)`
    gets the result so far each time verl logs a step (the json is then rewritten: a run stopped from outside
    keeps its steps)."""
    metrics, log = out / "verl_metrics.jsonl", out / "verl.log"
    metrics.unlink(missing_ok=True)
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics)}
    start, returncode, logged = time.time(), None, 0

    def result() -> dict:
        return {"verl_command": shlex.join(["python", "-m", "verl.trainer.main_ppo", *overrides]),
                "returncode": returncode, "wall_s": time.time() - start, "peak_memory_gib": memory.peaks_gib(),
                "memory_total_gib": memory.totals_gib(), "steps": read_steps(metrics)}

    with PeakMemoryMonitor() as memory, open(log, "w") as sink:
        process = subprocess.Popen(command, cwd=out, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        while returncode is None:
            try:
                returncode = process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                if timeout_s and time.time() - start > timeout_s:
                    stop_process_tree(process, grace_s=0)  # Ray's workers too, which hold the GPU
                    returncode = "timeout"
            partial = result()
            if on_step is not None and len(partial["steps"]) > logged:
                logged = len(partial["steps"])
                on_step(partial)
    final = result()
    if returncode != 0:
        final["error"] = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    return final


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="grpo")
    parser.add_argument("--model-dir", required=True, help="an HF checkpoint dir (bench/common/random_model.py makes one)")
    parser.add_argument("--data", required=True, help="GSM8K prompts in verl's parquet schema")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout-s", type=int, default=0, help="stop verl after this many seconds; 0: no limit")
    parser.add_argument("--packing", choices=("auto", "on", "off"), default="auto",
                        help="verl's sequence packing (use_remove_padding): auto = on where flash-attn imports")
    args, extra = parser.parse_known_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not packing_on(args.packing):
        extra = WITHOUT_FLASH_ATTN + extra
    overrides = verl_overrides(args.shape, str(Path(args.model_dir).resolve()), str(Path(args.data).resolve()),
                               args.steps, out, extra)
    report = {"framework": "verl", "shape": args.shape, "gpus": SHAPES[args.shape]["gpus"], "device": device_name(),
              "versions": versions(), "command": shlex.join(["python", "bench/verl/grpo_gpu.py", *sys.argv[1:]]),
              "overrides": overrides, "config": compose(overrides)}
    path = out / "verl.json"
    report |= run_verl(overrides, out, args.timeout_s,
                       on_step=lambda partial: path.write_text(json.dumps(report | partial, indent=1) + "\n"))
    path.write_text(json.dumps(report, indent=1) + "\n")
    times = [f"{s['timing_s/step']:.2f}" for s in report["steps"]]
    print(f"verl {args.shape}: exit {report['returncode']}, step times {', '.join(times) or 'none'} s, "
          f"peak {report['peak_memory_gib']} GiB; wrote {path}", flush=True)
    return 0 if report["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
