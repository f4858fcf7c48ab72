"""The dry run checks config and data and prints the plan of a run that cannot run here (8 GPUs, Qwen3-8B)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli import main
from core.config import ConfigError
from core.data.rows import write_rows
from core.trainer.plan import check_data_schema

REPO = Path(__file__).resolve().parent.parent
RUN_QWEN3_8B = REPO / "recipes" / "grpo" / "run_qwen3_8b.sh"


def gsm8k_rows(n: int = 4) -> list[dict]:
    """Rows in verl's GSM8K schema, as `recipezoo data gsm8k` will write them."""
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"Tom has {i} apples and buys 2 more. How many now? "
                                                   "Let's think step by step and output the final answer after \"####\"."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 2)},
            "extra_info": {"split": "train", "index": i},
        }
        for i in range(n)
    ]


@pytest.fixture
def gsm8k_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPEZOO_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "gsm8k"
    write_rows(gsm8k_rows(), data / "train.parquet")
    write_rows(gsm8k_rows(), data / "test.parquet")
    return data


def run_script(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DATA=str(data_dir), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run(["bash", str(RUN_QWEN3_8B), *args], env=env, capture_output=True, text=True, timeout=300)


def dry_run(capsys, *overrides: str) -> tuple[int, str, str]:
    code = main(["train", "--recipe", "grpo", "--dry-run", *overrides])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---- the real 8-GPU run, checked offline -------------------------------------------------------
def test_run_qwen3_8b_dry_run_prints_the_8_gpu_plan_offline(gsm8k_dir):
    result = run_script(gsm8k_dir, "--dry-run")
    assert result.returncode == 0, result.stderr
    plan = result.stdout
    assert "model        Qwen/Qwen3-8B" in plan and "the dry run does not" in plan
    assert "1 node × 8 GPUs = 8 GPUs" in plan
    assert "actor+rollout+ref (colocated on 8 GPUs)" in plan and "critic" not in plan
    assert "rollout      vllm: n=5" in plan
    assert "prompts/step              1024" in plan
    assert "sequences/step            5120" in plan
    assert "mini-batches/step         4 " in plan and "= 4 optimizer steps" in plan
    assert "sequences/mini-batch      1280  (160 per device)" in plan
    assert "32 sequences, 5 gradient-accumulation steps" in plan
    assert "prompt ≤ 512 tokens, response ≤ 1024 tokens" in plan
    assert "steps        105 " in plan and "every 5 steps" in plan
    assert "loss term low_var_kl × 0.001" in plan
    assert f"{gsm8k_dir / 'train.parquet'} (4 rows)" in plan


def test_run_qwen3_8b_with_3_gpus_fails_the_batch_divisibility_check(gsm8k_dir):
    result = run_script(gsm8k_dir, "--dry-run", "trainer.n_gpus_per_node=3")  # an override after the flag
    assert result.returncode == 2
    assert "data.train_batch_size=1024 must be divisible by the number of ranks (3)" in result.stderr
    assert "trainer.n_gpus_per_node=3" in result.stderr and "Traceback" not in result.stderr


# ---- the embedded default ----------------------------------------------------------------------
def test_dry_run_of_the_embedded_default_loads_no_model(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RECIPEZOO_CACHE", str(tmp_path))

    def refuse(*args, **kwargs):
        raise AssertionError("the dry run must not build, load or download a model")

    monkeypatch.setattr("core.models.warmstart.warm_started_model_path", refuse)  # builds the embedded model
    monkeypatch.setattr("core.trainer.base.build_components", refuse)  # tokenizer, models, rollout
    code, out, _ = dry_run(capsys)
    assert code == 0
    assert "embedded://tiny-arith" in out and "rollout      hf: n=8" in out
    assert "(3000 rows)" in out and "notes" not in out


def test_trainer_dry_run_key_works_like_the_flag(capsys, gsm8k_dir):
    code = main(["train", "--recipe", "grpo", "trainer.dry_run=true", f"data.train_files={gsm8k_dir}/train.parquet",
                 f"data.val_files={gsm8k_dir}/test.parquet", "data.train_batch_size=4", "actor.ppo_mini_batch_size=2"])
    assert code == 0
    assert "prompts/step              4" in capsys.readouterr().out


def test_a_disaggregated_plan_puts_the_rollout_workers_on_devices_of_their_own(capsys):
    code, out, _ = dry_run(capsys, "trainer.controller=ray", "trainer.placement=disaggregated",
                           "trainer.n_gpus_per_node=2", "trainer.rollout_workers=3", "trainer.schedule=one_step_off")
    assert code == 0
    assert "1 node × 2 GPUs = 2 GPUs, one pool (global_pool) (CPU processes where there is no GPU), and 3 GPUs of the " \
           "rollout workers' own" in out
    assert "roles        actor+ref (colocated on 2 GPUs); rollout (on 3 GPUs)" in out


# ---- bad inputs fail with a message that names the key ------------------------------------------
def test_missing_ground_truth_names_the_file_row_field_and_key(capsys, gsm8k_dir, tmp_path):
    rows = gsm8k_rows()
    del rows[2]["reward_model"]["ground_truth"]
    bad = write_rows(rows, tmp_path / "bad.parquet")
    code, _, err = dry_run(capsys, f"data.train_files={bad}", f"data.val_files={gsm8k_dir}/test.parquet")
    assert code == 2
    assert f"{bad} row 2 (data.train_files): no field 'reward_model.ground_truth' (data.ground_truth_key)" in err


def test_missing_data_file_names_the_key_and_how_to_make_it(capsys, gsm8k_dir):
    code, _, err = dry_run(capsys, f"data.train_files={gsm8k_dir}/nope.parquet")
    assert code == 2
    assert f"data.train_files: {gsm8k_dir}/nope.parquet does not exist" in err
    assert "recipezoo data gsm8k --out DIR" in err


def test_unknown_rollout_name_lists_the_backends(capsys):
    code, _, err = dry_run(capsys, "rollout.name=tgi")
    assert code == 2
    assert "rollout.name='tgi' is not one of ['hf', 'vllm', 'sglang']" in err


def test_a_prompt_that_is_not_messages_names_the_prompt_key(tmp_path):
    rows = gsm8k_rows()
    rows[1]["prompt"] = [{"text": "no role"}]
    path = write_rows(rows, tmp_path / "train.jsonl")
    with pytest.raises(ConfigError, match=r"row 1 \(data.val_files\): field 'prompt' \(data.prompt_key\) must be"):
        check_data_schema([path], "prompt", "reward_model.ground_truth", files_key="data.val_files")


# ---- memory per GPU: the launch check's model and refusal ----------------------------------------------
QWEN3_8B_RANDOM = ("model.path=bench/configs/qwen3-8b", "model.init=random")  # Qwen3-8B's config.json, nothing downloaded


def test_run_qwen3_8b_dry_run_shows_each_phase_per_gpu_with_its_parts(gsm8k_dir):
    result = run_script(gsm8k_dir, "--dry-run", *QWEN3_8B_RANDOM)
    assert result.returncode == 0, result.stderr
    # 8.19B parameters over 8 GPUs, GiB: without gradients 12 B + the reference's 4 = 15.3, with them 19.1;
    # the engine's share 0.5 × 79.2 = 39.6; a micro-batch of 32 sequences × (512 + 1024) = 49152 tokens.
    assert ("memory       per GPU of a 79.2 GiB GPU (none here: an H100 80GB's, as CUDA counts it), 8.19B parameters, "
            "prompts at data.max_prompt_length (512 tokens), responses at full length") in result.stdout
    assert ("  generation  58.3 GiB  73.6% = training state without gradients 15.3 + the engine's "
            "rollout.gpu_memory_utilization=0.5 share 39.6 + CUDA runtime 3.4\n") in result.stdout
    assert ("= training state 19.1 + gathered weights 6.8 + activations of 49152 tokens 24.3 + CUDA runtime 3.4 "
            "(53.6 GiB must fit) + blocks the caching allocator keeps 35.2\n") in result.stdout
    assert ("  target      ≤ 95% of the GPU: the update is over (at full-length prompts: the data's mean needs less); "
            "within it with actor.expandable_segments=true (no cached blocks: 35.2 GiB less), "
            "or actor.micro_batch_tokens=37462 or less") in result.stdout
    assert "would refuse" not in result.stdout


def over_memory(gsm8k_dir) -> list[str]:
    # GRPO 8B on 2 GPUs with an engine share of 0.6: its generation phase cannot fit an H100.
    return [*QWEN3_8B_RANDOM, f"data.train_files={gsm8k_dir}/train.parquet", f"data.val_files={gsm8k_dir}/test.parquet",
            "trainer.n_gpus_per_node=2", "rollout.name=vllm", "rollout.gpu_memory_utilization=0.6",
            "data.train_batch_size=4", "actor.ppo_mini_batch_size=2"]


def launch_refusal(overrides: list[str]) -> str:
    from core.config import load_config
    from core.trainer.memory_estimate import check_run_fits

    with pytest.raises(ValueError) as refused:
        check_run_fits(load_config("grpo", overrides), "bench/configs/qwen3-8b", 2, with_reference=True,
                       with_critic=False)
    return str(refused.value)


def test_the_dry_run_refuses_a_setting_over_memory_as_the_launch_does(capsys, gsm8k_dir, monkeypatch):
    import torch

    class H100:
        total_memory = int(79.2 * 2**30)

    overrides = over_memory(gsm8k_dir)
    code, out, _ = dry_run(capsys, *overrides)  # no GPU here: the plan says what the launch would say on an H100
    assert code == 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: H100())
    message = launch_refusal(overrides)
    assert message.startswith("generation needs ") and "rollout.gpu_memory_utilization to " in message
    assert f"  launch      would refuse on a 79.2 GiB GPU: {message}\n" in out
    code, out, err = dry_run(capsys, *overrides)  # on the H100: refused, in the launch's words
    assert code == 1 and out == ""
    assert err.startswith(f"recipezoo: ValueError: {message} — ")


def test_a_tensor_parallel_group_shares_its_rows_in_the_batch_plan():
    """64 prompts × 5 in mini-batches of 32 prompts: 160 sequences. On 2 GPUs data-parallel each takes 80; with
    actor.tensor_parallel_size=2 both GPUs are one data-parallel rank and each takes all 160 (5 micro-batches of 32)."""
    from core.config import load_config
    from core.trainer.plan import batch_summary

    overrides = ["data.train_batch_size=64", "rollout.n=5", "actor.ppo_mini_batch_size=32", "actor.micro_batch_size=32"]
    assert batch_summary(load_config("grpo", overrides), 2)["sequences_per_mini_batch_per_device"] == 80
    tp = batch_summary(load_config("grpo", [*overrides, "actor.tensor_parallel_size=2"]), 2)
    assert (tp["sequences_per_mini_batch_per_device"], tp["grad_accumulation_steps"]) == (160, 5)


def test_a_converted_pypi_model_is_planned_from_its_cache_dir(capsys, gsm8k_dir, random_model_dir):
    """pypi://NAME already converted: the dry run reads its cached config.json, as a local dir, and downloads
    nothing; not yet converted, the memory is left to the launch."""
    import json
    import shutil

    from core.models.fetch import SOURCE_FILE, model_dir

    data = [f"data.train_files={gsm8k_dir / 'train.parquet'}", f"data.val_files={gsm8k_dir / 'test.parquet'}",
            "model.path=pypi://SmolLM2-135M-Instruct", "trainer.device=cuda", "rollout.name=vllm"]
    code, out, _ = dry_run(capsys, *data)
    assert code == 0 and "memory       estimated at launch" in out
    cached = model_dir("SmolLM2-135M-Instruct")  # under the fixture's RECIPEZOO_CACHE
    shutil.copytree(random_model_dir, cached)
    (cached / SOURCE_FILE).write_text(json.dumps({"converter": 2}))
    code, out, _ = dry_run(capsys, *data)
    assert code == 0 and "memory       per GPU of a 79.2 GiB GPU" in out and "generation " in out
