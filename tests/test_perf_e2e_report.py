"""The ours-vs-TRL section of results/perf/README.md from synthetic runs (made up here, never results)."""

import json
from pathlib import Path

from bench.common.suite_calls import record  # noqa: E402
from bench.perf.e2e_report import e2e_section, write_e2e_plot  # noqa: E402


def write_pair(directory: Path, ours_device: str, trl_device: str) -> None:
    steps = [{"timing_s/step": 30.0, "perf/throughput": 1000.0},
             *({"timing_s/step": 10.0, "timing_s/gen": 6.0, "timing_s/update_actor": 3.0, "perf/throughput": 9000.0}
               for _ in range(2))]
    (directory / "e2e_ours.json").write_text(json.dumps({"device": ours_device, "command": "ours", "steps": steps}))
    (directory / "e2e_trl.json").write_text(json.dumps({
        "device": trl_device, "command": ["trl"], "steps": [{"step_s": 25.0}],
        "summary": {"median_step_s": 20.0, "tokens_per_s_per_gpu": 4000.0, "steps_summarized": [2, 3],
                    "median_breakdown_s": {"gen": 12.0, "reward": 0.0, "old_log_prob_and_rest": 3.0,
                                           "update_actor": 4.5, "sync_weights": 0.5}}}))


def test_same_device_gives_the_speedup(tmp_path):
    write_pair(tmp_path, "GPU-X", "GPU-X")
    text = "\n".join(e2e_section(tmp_path))
    assert "Same GPU (GPU-X)" in text and "Speed-up = TRL step time / ours: **2.00×** (target ≥ 1.5×: met)" in text


def test_runs_from_two_machines_are_not_compared(tmp_path):
    write_pair(tmp_path, "GPU-X", "GPU-Y")
    text = "\n".join(e2e_section(tmp_path))
    assert "Not compared: ours ran on GPU-X and TRL on GPU-Y" in text and "Speed-up" not in text


def test_runs_from_two_calls_on_one_gpu_model_are_not_compared_and_the_old_plot_goes(tmp_path):
    write_pair(tmp_path, "GPU-X", "GPU-X")
    assert write_e2e_plot(tmp_path) == ["e2e_breakdown.png"] and (tmp_path / "e2e_breakdown.png").exists()
    record(tmp_path, "call-2", ["e2e_ours.json"])  # a later call re-ran ours only
    text = "\n".join(e2e_section(tmp_path))
    assert "Not compared: ours and TRL ran in different calls" in text and "Speed-up" not in text
    assert write_e2e_plot(tmp_path) == [] and not (tmp_path / "e2e_breakdown.png").exists()
