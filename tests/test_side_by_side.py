"""bench/perf/side_by_side*.py on CPU: each framework is asked for the same work, the ours' plan of checkpointed
layers, the runner's per-step json and error capture, and the report's section and plot from planted json files
(planted: written by these tests, not measured; no GPU, vLLM, verl or TRL runs here)."""

import json
import shlex
import sys
from pathlib import Path

import pytest

import bench.perf.side_by_side_run as runner
from bench.perf.side_by_side import SHAPES, ours_command, plan_checkpoint_layers, trl_command, verl_command, verl_extra
from bench.perf.side_by_side_report import side_by_side_section, write_side_by_side_plot
from bench.verl.grpo_gpu import verl_overrides
from core.config import load_config


def _pairs(items: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items if "=" in item)


def _flags(command: list[str]) -> dict[str, str]:
    return {arg[2:]: value for arg, value in zip(command, command[1:]) if arg.startswith("--")}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_framework_is_asked_for_the_same_work(name, tmp_path):
    shape = SHAPES[name]
    ours = _pairs(ours_command(shape, "py", "M", "D", 4, tmp_path, 0))
    verl_cmd = verl_command(shape, "py", "M", "D", 4, tmp_path, 0)
    verl = _pairs(verl_overrides(shape.verl_shape, "M", "D", 4, tmp_path, verl_cmd[verl_cmd.index("--out") + 2:]))
    trl = _flags(trl_command(shape, "py", "M", "D", 4, tmp_path))
    rollout, actor = "actor_rollout_ref.rollout", "actor_rollout_ref.actor"
    work = {  # (ours, verl, TRL) for each part of the step's work
        "prompts": (ours["data.train_batch_size"], verl["data.train_batch_size"], trl["prompts-per-step"]),
        "samples": (ours["rollout.n"], verl[f"{rollout}.n"], trl["n"]),
        "prompt length": (ours["data.max_prompt_length"], verl["data.max_prompt_length"], trl["max-prompt-len"]),
        "response length": (ours["data.max_response_length"], verl["data.max_response_length"], trl["max-response-len"]),
        # one optimizer step per rollout: the mini-batch is every prompt (TRL: accumulation over the whole batch)
        "prompts per optimizer step": (ours["actor.ppo_mini_batch_size"], verl[f"{actor}.ppo_mini_batch_size"],
                                       trl["prompts-per-step"]),
        "lr": (float(ours["actor.lr"]), float(verl[f"{actor}.optim.lr"]), float(trl["lr"])),
        "engine share": (ours["rollout.gpu_memory_utilization"], verl[f"{rollout}.gpu_memory_utilization"],
                         trl["gpu-memory-utilization"]),
    }
    for part, (a, b, c) in work.items():
        assert str(a) == str(b) == str(c), f"{name} {part}: ours {a}, verl {b}, TRL {c}"
    assert ours["actor.clip_ratio_low"] == ours["actor.clip_ratio_high"] == verl[f"{actor}.clip_ratio_low"] \
        == verl[f"{actor}.clip_ratio_high"] == "0.2"  # TRL's epsilon is 0.2 (trl_grpo_gpu.grpo_config)
    assert ours["actor.micro_batch_tokens"] == str(shape.micro_batch_tokens)
    assert verl[f"{actor}.ppo_max_token_len_per_gpu"] == str(shape.micro_batch_tokens)
    assert ours["reward.custom_function.path"] == verl["reward.custom_reward_function.path"]
    assert trl["reward"] == "varied" and Path(ours["reward.custom_function.path"]).name == "varied_reward.py"
    assert ours["actor.use_kl_loss"] == "false" and verl[f"{actor}.use_kl_loss"] == "false"
    assert ours["rollout.calculate_log_probs"] == verl[f"{rollout}.calculate_log_probs"] == "true"
    assert verl_extra(shape)[-1] in verl_cmd


def test_ours_overrides_are_real_keys_giving_one_optimizer_step(tmp_path):
    shape = SHAPES["4b"]
    command = ours_command(shape, "py", "M", "D", 4, tmp_path, 26)
    overrides = command[command.index("--out") + 2:]
    config = load_config("grpo", ["model.path=bench/configs/qwen3-4b", *overrides])
    assert config.actor.ppo_mini_batch_size == config.data.train_batch_size == 32
    assert config.actor.use_kl_loss is False and config.data.max_response_length == 1024
    assert config.actor.gradient_checkpointing is True and config.actor.checkpoint_layers == 26


def test_the_plan_checkpoints_no_layer_at_0_6b_and_the_fewest_that_fit_at_4b():
    from core.trainer.memory_estimate import GIB, ModelShape, count_parameters, per_gpu_memory

    assert plan_checkpoint_layers(SHAPES["0.6b"]) == 0
    layers = plan_checkpoint_layers(SHAPES["4b"])
    assert 0 < layers < 36

    def peak(n: int) -> float:
        model = "bench/configs/qwen3-4b"
        command = ours_command(SHAPES["4b"], "py", "M", "D", 4, Path("/tmp"), n)
        config = load_config("grpo", [f"model.path={model}", *command[command.index("--out") + 2:]])
        return per_gpu_memory(config, ModelShape.from_pretrained(model), count_parameters(model), 1, 140.4 * GIB,
                              with_reference=False, with_critic=False)["peak"] / (140.4 * GIB)

    assert peak(layers) <= 0.95 < peak(layers - 1)


FAKE_FRAMEWORK = """
import json, sys, time
from pathlib import Path
out = Path(sys.argv[1]); steps = []
for step in (1, 2):
    steps.append({"step": step, "timing_s/step": 2.0 * step, "timing_s/gen": 1.0, "timing_s/update_actor": 0.5,
                  "timing_s/sync_weights": 0.1, "perf/throughput": 1000.0,
                  "rollout/logprob_diff/mean": 0.01, "rollout/logprob_diff/max": 0.5})
    (out / "grpo.json").write_text(json.dumps({"device": "fake", "steps": steps}))
    time.sleep(0.3)
print("CUDA out of memory in step 3 (planted)")
sys.exit(3)
"""


def test_the_runner_keeps_each_step_and_the_error_of_a_run_that_fails(tmp_path, monkeypatch):
    """A stand-in for ours' GPU run (a script writing grpo.json step by step, then failing): the column's json
    holds its two steps in the side by side's schema, its exit and the end of its log."""
    monkeypatch.setattr(runner, "POLL_S", 0.1)
    script = tmp_path / "fake.py"
    script.write_text(FAKE_FRAMEWORK)
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir(), out.mkdir()
    result = runner.run_column("ours", "0.6b", [sys.executable, str(script), str(work)], work, out, 0,
                               {"checkpoint_layers": 0})
    written = json.loads((out / "sbs_0.6b_ours.json").read_text())
    assert written == result and written["returncode"] == 3
    assert "CUDA out of memory in step 3 (planted)" in written["error"]
    assert [s["step_s"] for s in written["steps"]] == [2.0, 4.0]
    assert written["steps"][0]["stages_s"] == {"gen": 1.0, "reward": 0.0, "old_log_prob": 0.0,
                                               "update_actor": 0.5, "sync_weights": 0.1}
    assert written["steps"][1]["logprob_diff"] == {"mean": 0.01, "max": 0.5}
    assert written["random_init"] is True and written["settings"] == {"checkpoint_layers": 0}


def test_the_runner_refuses_a_missing_model_dir_before_anything_starts(tmp_path, capsys):
    data = tmp_path / "train.parquet"
    data.write_text("")
    with pytest.raises(SystemExit):
        runner.parse_args(["--shape", "0.6b", "--model-dir", str(tmp_path / "nope"), "--data", str(data)])
    assert "--model-dir" in capsys.readouterr().err and not list(tmp_path.glob("sbs_*"))


def _planted(directory: Path, framework: str, step_s: list[float], gen: float, **extra) -> None:
    steps = [{"step": i + 1, "step_s": s, "stages_s": {"gen": gen, "reward": 0.1, "old_log_prob": 0.0,
                                                       "update_actor": s - gen - 0.4, "sync_weights": 0.3},
              "tokens_per_s_per_gpu": 1000.0 / s, "logprob_diff": {"mean": 0.02, "max": 0.7}}
             for i, s in enumerate(step_s)]
    report = {"framework": framework, "shape": "0.6b", "command": f"python -m {framework}", "device": "NVIDIA H200",
              "versions": {}, "settings": {}, "steps": steps, "peak_memory_gib": 60.0, "returncode": 0, **extra}
    (directory / f"sbs_0.6b_{framework}.json").write_text(json.dumps(report))


def test_the_report_leads_with_the_plot_and_says_why_a_column_could_not_run(tmp_path):
    _planted(tmp_path, "ours", [30.0, 8.0, 9.0, 10.0], gen=5.0)  # median after the first: 9.0
    _planted(tmp_path, "trl", [50.0, 27.0, 22.5, 30.0], gen=12.0)  # median 27.0: 3.00× ours
    _planted(tmp_path, "verl", [], gen=0.0, returncode=1, error="Traceback\nRuntimeError: flash-attn (planted)")
    (tmp_path / "calls.json").write_text(json.dumps({f"sbs_0.6b_{fw}.json": "call-1" for fw in ("ours", "trl", "verl")}))
    assert write_side_by_side_plot(tmp_path) == ["side_by_side.png"]
    lines = side_by_side_section(tmp_path)
    text = "\n".join(lines)
    assert lines[2] == "![side_by_side.png](side_by_side.png)"
    assert "| **step** | **9.00** | **—** | **27.00** |" in text  # ours, verl, TRL
    assert "TRL step / ours: **3.00×** (target ≥ 2.5×: met)" in text
    assert "could not run: `exit 1: Traceback / RuntimeError: flash-attn (planted)`" in text
    assert "0.0200 / 0.700" in text


def test_a_column_from_another_call_is_left_out(tmp_path):
    _planted(tmp_path, "ours", [30.0, 8.0], gen=5.0)
    _planted(tmp_path, "trl", [50.0, 27.0], gen=12.0)
    (tmp_path / "calls.json").write_text(json.dumps({"sbs_0.6b_ours.json": "a", "sbs_0.6b_trl.json": "b"}))
    text = "\n".join(side_by_side_section(tmp_path))
    assert "left out: it ran in another call" in text and "TRL step / ours" not in text


def test_commands_are_shell_quotable(tmp_path):
    assert shlex.split(shlex.join(trl_command(SHAPES["4b"], "py", "M", "D", 4, tmp_path)))[-1] == "--gradient-checkpointing"
