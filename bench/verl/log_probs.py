"""verl 0.9.1's old log-probs of one saved batch, computed by verl's own actor as its trainer computes them, for
bench/verl/numerics.py's `--verl-log-probs`.

    python -m bench.verl.log_probs --batch batch_step2.pt --model-dir DIR --shape dapo8b --out verl_log_probs.pt

Run in verl's environment, on one GPU. The batch is one step of our run (`trainer.save_batch_step`); DIR is the HF
checkpoint both frameworks' forwards load. The path is verl's: its Hydra config for the shape as
bench/verl/grpo_gpu.py runs it (FSDP2, dynamic batch sizes, the shape's log-prob token budget, sequence packing
where flash-attn is installed), an `ActorRolloutRefWorker` of role `actor` built by its own `init_model` (a
TrainingWorker over verl's FSDP engine, weights in fp32, bf16 compute), and the trainer's `_compute_old_log_prob`
steps: DataProto → TensorDict, `left_right_2_no_padding`, the worker's `compute_log_prob`, `no_padding_2_padding`.
What is not verl's: one process stands in for Ray's worker group (the worker is called directly, a world of one,
no dispatch), and the batch is ours, not one verl sampled. Saves the (B, T_resp) fp32 tensor, zero off the response.

On a machine without CUDA (the tests), `--packing off` runs verl's padded path: verl 0.9.1 knows no CPU platform, so
a CPU one is registered through its platform plugin point, and `--fp32` turns bf16 autocast off.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

import torch

from bench.verl.grpo_gpu import SHAPES, WITHOUT_FLASH_ATTN, compose, packing_on, verl_overrides
from core.data.batch_file import load_batch_argument

FP32 = "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"


def actor_config(shape: str, model_dir: str, packing: bool, fp32: bool):
    """verl's `actor_rollout_ref` config for the shape, as main_ppo would run it (bench/verl/grpo_gpu.py)."""
    from omegaconf import OmegaConf

    extra = ([] if packing else WITHOUT_FLASH_ATTN) + ([FP32] if fp32 else [])
    overrides = verl_overrides(shape, model_dir, data="unused.parquet", steps=1, out=Path("unused"), extra=extra)
    return OmegaConf.create(compose(overrides)["actor_rollout_ref"])


def single_process_world() -> None:
    """What Ray's worker group would give verl's worker: rank 0 of a world of one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    if not torch.cuda.is_available():
        use_cpu_platform()
        torch.distributed.init_process_group("gloo")  # verl would ask for NCCL, which a CPU build lacks


def use_cpu_platform() -> None:
    """verl 0.9.1 detects CUDA, NPU or ROCm and falls back to CUDA; its plugin point takes another platform. This one
    places everything on the CPU and makes the memory statistics zero. Set before verl's workers are imported: some
    modules read the device name once, at import."""
    from verl.plugin.platform.platform_cuda import PlatformCUDA
    from verl.plugin.platform.platform_manager import set_platform

    class CPUModule:  # torch.cpu, with the torch.cuda calls verl makes answered as a device without memory
        get_device_name = staticmethod(lambda *args: "CPU")
        mem_get_info = staticmethod(lambda *args: (0, 0))

        def __getattr__(self, name):
            if name.startswith(("memory_", "max_memory_")):
                return lambda *args, **kwargs: 0
            if name in ("empty_cache", "reset_peak_memory_stats", "synchronize"):
                return lambda *args, **kwargs: None
            return getattr(torch.cpu, name)

    class CPUPlatform(PlatformCUDA):
        device_name, device_module = "cpu", CPUModule()

        def is_available(self) -> bool:
            return True

        def current_device(self):
            return "cpu"  # what verl passes to .to(): an index would mean a CUDA device

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index) -> None:
            pass

        def synchronize(self, device_index=None) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        manual_seed_all = manual_seed

        def communication_backend_name(self) -> str:
            return "gloo"

    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")  # verl registers its FSDP engine for cuda and npu only
    set_platform(CPUPlatform())


def verl_old_log_probs(batch, config, temperature: float) -> torch.Tensor:
    """(B, T_resp): verl's actor worker on `batch`, through the steps of RayPPOTrainer._compute_old_log_prob."""
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    worker = ActorRolloutRefWorker(config=config, role="actor")
    worker.init_model()
    width = batch["responses"].shape[1]
    tensors = {key: batch[key] for key in ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")}
    tensors["prompts"] = batch["input_ids"][:, :-width]  # (B, T_prompt), left-padded, as verl's rollout returns it
    proto = DataProto.from_dict(tensors=tensors, meta_info={
        "temperature": temperature, "global_token_num": batch["attention_mask"].sum(-1).tolist()})
    data = left_right_2_no_padding(proto.to_tensordict())
    tu.assign_non_tensor(data, calculate_entropy=True, calculate_sum_pi_squared=False, compute_loss=False)
    output = worker.compute_log_prob(data)
    log_probs = no_padding_2_padding(tu.get(output, "log_probs"), data).float().cpu()
    return log_probs * batch["response_mask"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", required=True, help="written by trainer.save_batch_step")
    parser.add_argument("--model-dir", required=True, help="the HF checkpoint both forwards load")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="grpo", help="verl's settings for this shape")
    parser.add_argument("--packing", choices=("auto", "on", "off"), default="auto",
                        help="verl's sequence packing (use_remove_padding): auto = on where flash-attn is installed")
    parser.add_argument("--fp32", action="store_true", help="fp32 compute instead of verl's bf16 (the CPU test)")
    parser.add_argument("--temperature", type=float, default=1.0, help="the rollout's; both shapes sample at 1.0")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    batch = load_batch_argument(parser, args.batch)
    single_process_world()
    config = actor_config(args.shape, str(Path(args.model_dir).resolve()), packing_on(args.packing), args.fp32)
    log_probs = verl_old_log_probs(batch, config, args.temperature)
    torch.save(log_probs, args.out)
    print(f"verl's old log-probs of {args.batch} ({tuple(log_probs.shape)}): {args.out}", flush=True)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
