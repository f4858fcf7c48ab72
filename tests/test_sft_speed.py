"""bench/perf/sft_speed.py and its report, on CPU: the settings both frameworks get (TRL's real packing and
SFTConfig), TRL's real padding-free collator read back into example lengths, and the table from planted json
(the GPU measurements themselves need a GPU: the json here is written by the test, not measured)."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from bench.perf import sft_speed, sft_speed_report

QWEN3_VOCAB = 151936
REPO = Path(__file__).resolve().parent.parent


def test_both_frameworks_get_the_same_rows_micro_batch_and_about_the_same_tokens_per_step(tmp_path):
    args = sft_speed.parse_args(["--model-dir", "m", "--name", "qwen3-1.7b", "--out", str(tmp_path)])
    rows = sft_speed.synthetic_rows((args.warmup + args.steps) * args.rows_per_step, QWEN3_VOCAB, args.prompt_len,
                                    args.completion_len)
    assert rows == sft_speed.synthetic_rows(len(rows), QWEN3_VOCAB, args.prompt_len, args.completion_len)
    assert all(64 <= len(p) <= 256 and 64 <= len(c) <= 512 for p, c in rows)
    settings = sft_speed.sft_settings(args, rows)
    ours = statistics.mean(settings["tokens_per_step"])
    assert len(settings["tokens_per_step"]) == args.warmup + args.steps
    assert settings["trl_packed_rows"] == sft_speed.packed_rows(rows, args.micro_batch_tokens)
    # TRL's packed rows of 16384 tokens are nearly full: a step's share holds our step's tokens within 5%
    assert settings["trl_packed_rows"] * args.micro_batch_tokens >= sum(len(p) + len(c) for p, c in rows)
    assert abs(settings["trl_tokens_per_step"] - ours) / ours < 0.05
    from trl import SFTConfig

    kwargs = sft_speed.trl_config_kwargs(settings, str(tmp_path / "trl"), liger=False)
    # bf16 needs a GPU in TrainingArguments' checks: off here only to build the config on CPU
    config = SFTConfig(**{**kwargs, "bf16": False, "use_cpu": True})
    assert config.packing and config.padding_free and config.packing_strategy == "bfd"
    assert config.max_length == args.micro_batch_tokens and config.per_device_train_batch_size == 1
    assert config.gradient_accumulation_steps == settings["trl_gradient_accumulation_steps"] == 7
    assert config.max_steps == args.warmup + args.steps and config.completion_only_loss
    assert kwargs["bf16"] and not config.gradient_checkpointing and not config.use_liger_kernel


def test_trls_padding_free_batches_are_read_back_into_their_example_lengths():
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    rows = sft_speed.synthetic_rows(6, 1000, (3, 9), (2, 7), seed=3)
    packed = [{"input_ids": [t for p, c in rows[:4] for t in p + c], "seq_lengths": [len(p) + len(c) for p, c in rows[:4]]},
              {"input_ids": [t for p, c in rows[4:] for t in p + c], "seq_lengths": [len(p) + len(c) for p, c in rows[4:]]}]
    batch = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(packed)
    assert sft_speed.segment_lengths(batch["position_ids"]) == [len(p) + len(c) for p, c in rows]


def test_bad_settings_are_one_line_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sft_speed.parse_args(["--model-dir", "m", "--name", "x", "--out", "o", "--prompt-len", "0:5"])
    assert "'0:5': expected MIN:MAX token counts" in capsys.readouterr().err
    args = sft_speed.parse_args(["--model-dir", "m", "--name", "x", "--out", "o", "--micro-batch-tokens", "100"])
    with pytest.raises(SystemExit, match=r"--micro-batch-tokens 100: below the longest example \(\d+ tokens\)"):
        sft_speed.sft_settings(args, sft_speed.synthetic_rows(4, 1000, args.prompt_len, args.completion_len))


def test_one_invocation_runs_both_frameworks_on_cpu_and_the_table_reads_their_json(tmp_path, random_model_dir):
    """The whole bench on the tiny random Qwen3 on CPU (fp32: TRL refuses bf16 without a GPU; no MFU without a
    GPU's peak): ours and TRL's SFTTrainer really train, each step's json is theirs, and the table has both rows.
    The speeds of a CPU say nothing; the GPU's are measured by bench/perf/sft_speed.sh."""
    import subprocess
    import sys

    out = tmp_path / "sft"
    command = [sys.executable, "-m", "bench.perf.sft_speed", "--model-dir", random_model_dir, "--name", "tiny",
               "--out", str(out), "--rows-per-step", "6", "--steps", "2", "--warmup", "1",
               "--micro-batch-tokens", "64", "--prompt-len", "4:10", "--completion-len", "4:12"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ours, trl, varlen = (json.loads((out / f"tiny-{name}.json").read_text()) for name in sft_speed.FRAMEWORKS)
    assert len(ours["step_s"]) == len(trl["step_s"]) == 3 and ours["settings"] == trl["settings"]
    assert ours["tokens"] == ours["settings"]["tokens_per_step"] and ours["tokens_per_s"] > 0
    # TRL's steps consumed every packed row of the data once (bfd keeps each example whole)
    assert sum(trl["tokens"]) == sum(ours["tokens"]) and trl["tokens_per_s"] > 0
    assert trl["trl_settings"]["gradient_accumulation_steps"] == trl["settings"]["trl_gradient_accumulation_steps"]
    # TRL with our packed attention: the same steps and tokens, the kernel named
    assert varlen["tokens"] == trl["tokens"] and varlen["trl_attention"] == "recipezoo_varlen" != trl["trl_attention"]
    assert ours["mfu"] is None and all(f > 0 for f in ours["flops"] + trl["flops"])
    table = tmp_path / "sft_speed.md"
    assert sft_speed_report.main(["--from", str(out), "--out", str(table)]) == 0
    assert all(f"| tiny | {name} |" in table.read_text() for name in sft_speed.FRAMEWORKS)


def planted(framework: str, model: str, tokens_per_s: float | None, mfu: float | None) -> dict:
    settings = {"rows_per_step": 256, "steps": 2, "warmup": 1, "tokens_per_step": [100, 200, 300],
                "micro_batch_tokens": 16384, "trl_tokens_per_step": 190.0, "prompt_len": [64, 256],
                "completion_len": [64, 512], "gradient_checkpointing": False, "compile": True}
    return {"framework": framework, "model": model, "settings": settings, "tokens_per_s": tokens_per_s, "mfu": mfu,
            "peak_memory_gib": 30.0, "step_s": [1.0, 1.0, 1.0], "device": "NVIDIA H200", "command": "sft_speed",
            "trl_settings": {"gradient_accumulation_steps": 7}, "trl_attention": "sdpa", "liger_kernel": False}


def test_the_table_says_ours_against_trl_and_each_target_met_or_not(tmp_path):
    results = {"qwen3-1.7b-ours.json": planted("ours", "qwen3-1.7b", 60000, 0.47),
               "qwen3-1.7b-trl.json": planted("trl", "qwen3-1.7b", 30000, 0.24),
               "qwen3-1.7b-trl_varlen.json": planted("trl_varlen", "qwen3-1.7b", 40000, 0.32),
               "qwen3-0.6b-ours.json": planted("ours", "qwen3-0.6b", 90000, 0.30),
               "qwen3-0.6b-trl.json": planted("trl", "qwen3-0.6b", 80000, 0.27),
               "qwen3-4b-ours.json": planted("ours", "qwen3-4b", 20000, 0.5),
               "unrelated.json": {"variants": []}}
    for name, result in results.items():
        (tmp_path / name).write_text(json.dumps(result))
    out = tmp_path / "sft_speed.md"
    assert sft_speed_report.main(["--from", str(tmp_path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| qwen3-1.7b | ours | 60,000 | 47.0 | 30.0 | 2 of 2 | compile on |" in text
    assert "| qwen3-1.7b | trl | 30,000 | 24.0 |" in text and "liger off (not installed)" in text
    assert ("- qwen3-1.7b: ours 2.00x TRL's tokens/s (target ≥ 1.5x: met), 1.50x TRL's with our attention kernel; "
            "MFU 47.0% (target ≥ 45% at ≥ 1.7B: met).") in text
    assert "- qwen3-0.6b: ours 1.12x TRL's tokens/s (target ≥ 1.5x: not met)." in text  # no MFU target below 1.7B
    assert "- qwen3-4b: no comparison, no timed step of trl." in text
    assert "200 tokens a step (TRL: 190)" in text
    assert "rerun: `SFT_SPEED_MODELS=qwen3-1.7b bash bench/perf/sft_speed.sh --compile`." in text  # not the argv
    with pytest.raises(SystemExit, match="no sft_speed json"):
        sft_speed_report.main(["--from", str(tmp_path / "empty"), "--out", str(out)])


def test_trl_with_our_attention_gets_each_packed_rows_sequence_bounds(tmp_path, random_model_dir, monkeypatch):
    """trl_varlen: TRL's batches reach our packed attention with their sequences' bounds (on CPU its per-sequence
    SDPA, which the kernel is checked against); without them it would attend across the packed examples."""
    from core.engine import packing

    bounds, reference = [], packing.per_sequence_attention

    def recording(query, key, value, cu_seqlens, scaling=None):
        bounds.append(cu_seqlens.tolist())
        return reference(query, key, value, cu_seqlens, scaling)

    monkeypatch.setattr(packing, "per_sequence_attention", recording)
    args = sft_speed.parse_args(["--model-dir", random_model_dir, "--name", "tiny", "--out", str(tmp_path),
                                 "--rows-per-step", "6", "--steps", "1", "--warmup", "0", "--micro-batch-tokens", "64",
                                 "--prompt-len", "4:10", "--completion-len", "4:12"])
    rows = sft_speed.rows_for(args)
    sft_speed.run_trl(args, rows, sft_speed.sft_settings(args, rows), tmp_path / "varlen.json", "trl_varlen")
    result = json.loads((tmp_path / "varlen.json").read_text())
    assert bounds and all(b[0] == 0 and b == sorted(b) for b in bounds)
    # each layer of a micro-batch sees its row's bounds: the examples the step's tokens came from
    assert sum(b[-1] for b in bounds) == sum(result["tokens"]) * 2  # the tiny model's 2 layers
