"""bench/lora/suite.py end to end on CPU: a tiny random-init model, the HF rollout, two steps, its json and the
README bench/lora/report.py generates from it (the GPU run is the same code with Qwen3-8B and vLLM)."""

import json

from bench.lora import suite as lora_suite


def test_the_suite_runs_a_tiny_model_and_reports_it(random_model_dir, tmp_path):
    out = tmp_path / "results"
    assert lora_suite.main(["--syncs", "merged", "--rollout", "hf", "--steps", "2", "--rank", "4", "--prompts", "4",
                            "--n", "2", "--max-response", "6", "--config-dir", random_model_dir,
                            "--work", str(tmp_path / "work"), "--out", str(out), "trainer.device=cpu",
                            "data.max_prompt_length=64"]) == 0
    (path,) = out.glob("grpo_lora-r4-merged_*_1gpu.json")
    result = json.loads(path.read_text())
    assert (result["sync"], result["lora"]["rank"], result["gpus"]) == ("merged", 4, 1)
    assert result["median_step_s"] > 0 and result["sync_s"] == result["stages_s"]["sync_weights"] > 0
    assert result["generated_tokens_per_s_per_gpu"] > 0 and result["trained_tokens_per_s_per_gpu"] > 0
    assert set(result["steps"]) == {"1", "2"} and "actor.lora.sync=merged" in result["command"]
    readme = (out / "README.md").read_text()
    assert f"| LoRA r4, merged sync | {result['device']} × 1 | eager | {result['median_step_s']:.1f} |" in readme


def test_the_full_weight_row_sits_beside_the_lora_row(random_model_dir, tmp_path):
    out, common = tmp_path / "results", ["--rollout", "hf", "--steps", "2", "--prompts", "4", "--n", "2",
                                         "--max-response", "6", "--config-dir", random_model_dir,
                                         "--work", str(tmp_path / "work"), "--out", str(tmp_path / "results"),
                                         "trainer.device=cpu", "data.max_prompt_length=64"]
    assert lora_suite.main(["--syncs", "merged", "--rank", "4", *common]) == 0
    assert lora_suite.main(["--full-weights", *common]) == 0
    (path,) = out.glob("grpo_full_*_1gpu.json")
    result = json.loads(path.read_text())
    assert result["lora"] is None and result["sync"] is None and "actor.lora" not in result["command"]
    assert result["update_mfu"] is not None and result["median_step_s"] > 0
    readme = (out / "README.md").read_text()
    assert f"| full (local) | {result['device']} × 1 | eager | {result['median_step_s']:.1f} |" in readme
    assert "| LoRA r4, merged sync |" in readme


def test_more_gpus_only_for_full_weights():
    import pytest

    with pytest.raises(SystemExit):
        lora_suite.parse_args(["--gpus", "2"])
    assert lora_suite.parse_args(["--full-weights", "--gpus", "2", "--rollout", "hf"]).gpus == 2


def test_adapter_sync_needs_vllm():
    import pytest

    with pytest.raises(SystemExit):
        lora_suite.parse_args(["--rollout", "hf"])  # the default --syncs includes adapter
