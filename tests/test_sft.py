"""`recipezoo sft` (core/trainer/sft.py): the SFT loss by hand, packed equal to unpacked on the real engine, a run on
the tiny model with MLflow and checkpoints that resumes bit for bit, bad input in one line before anything starts,
and the SFT → RL pipeline: a checkpoint is a `model.path`, and `recipezoo merge` exports it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from core.algos.sft_loss import make_sft_loss
from core.batch import Batch
from core.cli import main as cli_main
from core.config import load_config
from core.data.arithmetic import make_rows
from core.data.rows import write_rows
from core.data.sft_dataset import SFTDataset, SFTKeys, collate_sft
from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config
from core.trainer.metrics import FlopsShape, training_flops
from core.trainer.sft import SFTTrainer


def test_the_sft_loss_is_the_masked_token_mean_nll_by_hand():
    log_probs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -4.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss_fn = make_sft_loss("token-mean", max_response_length=3)
    loss, metrics = loss_fn(log_probs, torch.zeros(2, 3), Batch({"response_mask": mask}), 3, 2)
    assert loss.item() == pytest.approx((1 + 2 + 0.5) / 3)
    # Split in two micro-batches with the mini-batch's normalisers, the shares add up to it; each reports its own mean.
    first, m1 = loss_fn(log_probs[:1], torch.zeros(1, 3), Batch({"response_mask": mask[:1]}), 3, 2)
    second, m2 = loss_fn(log_probs[1:], torch.zeros(1, 3), Batch({"response_mask": mask[1:]}), 3, 2)
    assert (first + second).item() == pytest.approx(loss.item())
    assert (m1["sft/loss"], m2["sft/loss"]) == (pytest.approx(1.5), pytest.approx(0.5))
    assert metrics["sft/loss"] == pytest.approx(3.5 / 3)


def test_training_flops_by_hand():
    shape = FlopsShape(matmul_params=100, layers=2, attention_width=8, vocab=50, hidden=4)
    # 6·100·(3 + 5) + 6·2·8·(9 + 25) + 6·50·4·7
    assert training_flops(shape, torch.tensor([3, 5]), head_tokens=7) == 4800 + 3264 + 8400


# ---- packing: no cross-contamination between packed examples -------------------------------------------------
@pytest.fixture(scope="module")
def sft_batch(tmp_path_factory):
    tokenizer = build_tiny_tokenizer()
    rows = make_rows("train", 6, seed=3)
    for i, row in enumerate(rows):  # ragged answers, so the packed row's sequences differ in length
        row["extra_info"]["answer"] += " ok" * i
    path = write_rows(rows, tmp_path_factory.mktemp("sft") / "train.parquet")
    dataset = SFTDataset(path, tokenizer, max_prompt_length=64, max_response_length=64,
                         keys=SFTKeys(response_key="extra_info.answer"))
    return tokenizer, collate_sft(dataset.items, dataset.pad_token_id)


def engine_for(tokenizer, **kwargs) -> FSDPEngine:
    torch.manual_seed(0)
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM(tiny_qwen3_config(tokenizer, initializer_range=0.2))
    return FSDPEngine(model, init_distributed("cpu"), optim=OptimConfig(lr=1e-2, grad_clip=1e9),
                      mixed_precision="fp32", **kwargs)


def test_the_loss_of_a_packed_batch_is_the_sum_of_the_unpacked_ones(sft_batch):
    tokenizer, batch = sft_batch
    loss_fn = make_sft_loss("token-mean", 64)
    num_tokens, num_seqs = int(batch["response_mask"].sum()), len(batch)
    packed = engine_for(tokenizer, remove_padding=True, micro_batch_size=len(batch))
    log_probs, entropy = packed._forward(batch, 1.0)  # one packed row holding all six examples
    packed_loss, _ = loss_fn(log_probs, entropy, batch, num_tokens, num_seqs)
    alone = engine_for(tokenizer, remove_padding=False)
    shares = [loss_fn(*alone._forward(batch.select([row]), 1.0), batch.select([row]), num_tokens, num_seqs)[0]
              for row in range(len(batch))]
    assert packed_loss.item() == pytest.approx(sum(share.item() for share in shares), rel=1e-5)
    assert packed_loss.item() > 0
    # And the update: one packed micro-batch has the gradient of one example per micro-batch.
    one = engine_for(tokenizer, remove_padding=True, micro_batch_tokens=10_000)
    rows = engine_for(tokenizer, remove_padding=False, micro_batch_size=1)
    metrics_one = one.update(batch, loss_fn, mini_batch_size=len(batch))
    metrics_rows = rows.update(batch, loss_fn, mini_batch_size=len(batch))
    assert metrics_one["actor/grad_norm"] == pytest.approx(metrics_rows["actor/grad_norm"], rel=1e-5)
    # Adam's first moment after one step is (1 − β1)·gradient: the gradients, compared directly (the weights
    # themselves move by ±lr wherever a gradient is nonzero, float noise included).
    for (name, a), (_, b) in zip(one.model.named_parameters(), rows.model.named_parameters()):
        torch.testing.assert_close(one.optimizer.state[a]["exp_avg"], rows.optimizer.state[b]["exp_avg"],
                                   rtol=1e-4, atol=1e-7, msg=name)


# ---- a run ---------------------------------------------------------------------------------------------
@pytest.fixture
def sft_overrides(random_model_dir, tmp_path):
    return [f"model.path={random_model_dir}", "trainer.total_steps=4", "trainer.test_freq=2", "trainer.save_freq=2",
            "data.train_batch_size=8", "actor.lr=1e-3", "data.val_max_samples=16",
            "tracking.backends=[console,mlflow]", f"tracking.uri=file://{tmp_path}/mlruns",
            f"trainer.output_dir={tmp_path}/out", "trainer.max_ckpt_to_keep=0"]


def mlflow_runs(tmp_path):
    import mlflow

    client = mlflow.MlflowClient(f"file://{tmp_path}/mlruns")
    experiment = client.get_experiment_by_name("recipezoo")
    return client, [] if experiment is None else client.search_runs([experiment.experiment_id])


def final_weights(config) -> dict:
    trainer = SFTTrainer(config)
    trainer.fit()
    return {name: tensor.clone() for name, tensor in trainer.engine.full_state_dict().items()}


def test_an_sft_run_logs_to_mlflow_checkpoints_and_resumes_bit_exact(sft_overrides, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    straight = final_weights(load_config("sft", sft_overrides))
    client, (run,) = mlflow_runs(tmp_path)
    losses = [m.value for m in client.get_metric_history(run.info.run_id, "sft/loss")]
    val = [m.value for m in client.get_metric_history(run.info.run_id, "val/sft_loss")]
    assert len(losses) == 4 and losses[-1] < losses[0] and len(val) == 3 and val[-1] < val[0]
    assert run.data.metrics["perf/tflops"] > 0 and run.data.metrics["perf/throughput"] > 0
    assert "perf/mfu" not in run.data.metrics  # a CPU has no bf16 peak to divide by
    checkpoints = tmp_path / "out" / "checkpoints"
    assert (checkpoints / "global_step_2" / "SHA256SUMS").is_file() and (checkpoints / "global_step_4").is_dir()
    # Stopped after step 2 (as a crash would leave it), then resumed: the same weights as the straight run.
    (checkpoints / "global_step_4").rename(tmp_path / "moved")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = final_weights(load_config("sft", [*sft_overrides, "trainer.resume=auto"]))
    for name, tensor in straight.items():
        assert torch.equal(resumed[name], tensor), name
    _, runs = mlflow_runs(tmp_path)
    assert len(runs) == 1  # the resumed run continued its MLflow run


def test_sft_then_grpo_from_the_checkpoint_and_merge_exports_it(sft_overrides, fast_overrides, tmp_path, monkeypatch,
                                                                 capsys):
    monkeypatch.setenv("RECIPEZOO_CACHE", str(tmp_path / "cache"))
    overrides = [o for o in sft_overrides if not o.startswith("tracking.")] + ["tracking.backends=[console]",
                                                                              "trainer.total_steps=2"]
    assert cli_main(["sft", *overrides]) == 0
    checkpoint = tmp_path / "out" / "checkpoints"
    saved = torch.load(checkpoint / "global_step_2" / "actor" / "model.pt", weights_only=True)
    # `recipezoo merge` exports the SFT checkpoint as it does an RL one.
    assert cli_main(["merge", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "merged")]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    for name, tensor in merged.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    # GRPO takes the checkpoint dir itself as model.path and starts from its weights.
    from core.trainer.base import BaseTrainer

    rl = [o for o in fast_overrides if not o.startswith(("model.path", "trainer.output_dir"))]
    config = load_config("grpo", [*rl, f"model.path={checkpoint}", f"trainer.output_dir={tmp_path}/rl"])
    trainer = BaseTrainer(config)
    start = trainer.actor_rollout.actor.full_state_dict()
    for name, tensor in saved.items():
        assert torch.equal(start[name], tensor), name
    trainer.fit()
    assert "exported the actor of" in capsys.readouterr().out


# ---- bad input: one line, before any model loads, no MLflow run ------------------------------------------------
@pytest.mark.parametrize("rows, extra, message", [
    ([{"q": "a", "answer": "b"}, {"q": "c"}], ["data.prompt_key=q", "data.response_key=answer"],
     "1 of 2 rows have no field 'answer' (data.response_key)"),
    ([{"q": "a", "answer": ["b"]}], ["data.prompt_key=q", "data.response_key=answer"],
     "row 0: field 'answer' (data.response_key) is list ['b'] — expected a string"),
    ([], [], "the file is empty (0 bytes)"),
    ([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a" * 80}]}],
     ["data.response_key=null"],
     "row 0: its response is 81 tokens, over data.max_response_length=24"),
])
def test_bad_sft_input_is_one_line_before_anything_starts(sft_overrides, tmp_path, capsys, monkeypatch, rows, extra,
                                                          message):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    path = tmp_path / "train.jsonl"
    write_rows(rows, path) if rows else path.write_text("")
    code = cli_main(["sft", *sft_overrides, f"data.train_files={path}", f"data.val_files={path}", *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("recipezoo: "), err
    assert message in err and str(path) in err
    assert mlflow_runs(tmp_path)[1] == [] and not list(tmp_path.rglob("global_step_*"))


def test_recipezoo_sft_refuses_an_rl_recipe(capsys):
    assert cli_main(["sft", "--recipe", "grpo"]) == 2
    assert "is not a supervised trainer" in capsys.readouterr().err


def test_the_sft_recipe_and_its_dry_run(capsys):
    config = load_config("sft")
    assert config.trainer.cls == "core.trainer.sft.SFTTrainer" and config.model.path == "embedded://tiny-base"
    assert cli_main(["sft", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "64 examples/step" in plan and "prompt prompt + response extra_info.answer" in plan


def test_the_8_gpu_launcher_dry_runs_offline(tmp_path):
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, DATA=str(tmp_path / "gsm8k"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    result = subprocess.run(["bash", str(repo / "recipes" / "sft" / "run_qwen3_8b.sh"), "--dry-run"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for line in ["model        Qwen/Qwen3-8B", "1 node × 8 devices (8 data-parallel)", "256 examples/step, 32 per rank",
                 "micro-batches of 16384 tokens", "prompt ≤ 512, response ≤ 1024", "87 steps, lr 1e-05",
                 "outputs/sft-qwen3-8b/checkpoints"]:
        assert line in result.stdout, line
