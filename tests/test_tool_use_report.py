"""bench/tool_use/report.py (results/tool_use/gpu/README.md): its arithmetic on SYNTHETIC runs written to tmp_path
(made-up numbers, never written to results/), and the committed page regenerated from the committed json files."""

import json
import re
from pathlib import Path

from bench.tool_use import report as tool_use_report

ROOT = Path(__file__).resolve().parents[1]


def synthetic_step(step: int, seconds: float, **metrics) -> dict:
    return {"step": step, "timing_s/step": seconds, "timing_s/gen": seconds / 2, "rollout/logprob_diff/mean": 0.01,
            "rollout/logprob_diff/max": 0.1 * step, "response_length/mean": 100.0, "critic/score/mean": 0.0,
            **metrics}


def write_run(root: Path, name: str, steps: list[dict]) -> None:
    (root / name).mkdir()
    (root / name / "grpo.json").write_text(json.dumps({
        "device": "SYNTHETIC GPU", "model_dir": "m", "steps": steps, "peak_memory_gib": [40.0],
        "command": f"python -m bench.common.grpo_vllm_gpu --out {name}"}))


def test_times_are_medians_after_the_first_step_and_the_tool_columns_are_the_tool_runs(tmp_path):
    tool = {"multi_turn/num_turns/mean": 1.0, "tool/call_rate": 0.1, "tool/errors": 0.0, "timing_s/tool": 1.0}
    write_run(tmp_path, "vllm_tool", [synthetic_step(1, 100.0, **tool),
                                      synthetic_step(2, 30.0, **{**tool, "tool/call_rate": 0.9, "tool/errors": 0.5}),
                                      synthetic_step(3, 40.0, **{**tool, "multi_turn/num_turns/mean": 2.0}),
                                      synthetic_step(4, 20.0, **tool)])
    write_run(tmp_path, "vllm_single", [synthetic_step(1, 90.0), synthetic_step(2, 25.0)])
    lines = tool_use_report.page(tmp_path)
    tool_row = next(line for line in lines if "Python tool" in line)
    # steps 2-4: s/step median of 30, 40, 20 = 30; turns first → last 1 → 1; call rate 0.10 → 0.10
    assert tool_row.startswith("| vLLM | multi-turn, Python tool | 4 | 30.0 | 15.0 | 1.00 |")
    assert "| 1.00 → 1.00 | 0.10 → 0.10 |" in tool_row
    single_row = next(line for line in lines if "single-turn |" in line)
    assert single_row.startswith("| vLLM | single-turn | 2 | 25.0 | 12.5 | – |")  # one step after the first
    reading = next(line for line in lines if line.startswith("- vLLM, tool run"))
    assert "(highest 0.90, step 2), tool errors per episode at that step 0.50" in reading
    diff = next(line for line in lines if line.startswith("- vLLM: "))
    assert "largest single token 0.400 (0.200 single-turn)" in diff  # max over the steps, not the last


def test_the_per_turn_logprob_gap_is_the_mean_over_steps(tmp_path):
    split = {"tool/call_rate": 0.5, "tool/errors": 0.0, "multi_turn/num_turns/mean": 2.0}
    write_run(tmp_path, "vllm_tool", [
        synthetic_step(1, 10.0, **split, **{"rollout/logprob_diff/first_turn_mean": 0.010,
                                            "rollout/logprob_diff/later_turns_mean": 0.020}),
        synthetic_step(2, 10.0, **split, **{"rollout/logprob_diff/first_turn_mean": 0.014,
                                            "rollout/logprob_diff/later_turns_mean": 0.030})])
    write_run(tmp_path, "vllm_single_tags", [synthetic_step(1, 10.0), synthetic_step(2, 10.0)])
    lines = tool_use_report.page(tmp_path, host="busy")
    assert any(line.startswith("| vLLM | single-turn, tool prompt | 2 |") for line in lines)
    assert "- vLLM, single-turn on the tool run's prompts: `rollout/logprob_diff` averages 0.0100" in "\n".join(lines)
    # (0.010 + 0.014) / 2 = 0.012; (0.020 + 0.030) / 2 = 0.025
    assert any("averages 0.0120 on the first turn's sampled tokens and 0.0250 on the later turns'" in line
               for line in lines)
    assert "Device: SYNTHETIC GPU (busy)." in "\n".join(lines)
    # step 1 alone: the weights every run starts from
    assert ("- vLLM, step 1 (the same pretrained weights in every run): `rollout/logprob_diff` 0.0100 with the tool "
            "(first turn 0.0100, later turns 0.0200), 0.0100 single-turn on the same prompts.") in lines


def test_the_committed_pages_are_what_the_committed_runs_give():
    for name in ("gpu", "gpu_shared_host", "gpu_same_prompts"):
        results = ROOT / "results" / "tool_use" / name
        committed = (results / "README.md").read_text()
        host = re.search(r'--host "([^"]*)"', committed)  # the page names the flag that regenerates it
        assert committed == "\n".join(tool_use_report.page(results, host and host.group(1))) + "\n"
