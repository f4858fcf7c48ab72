"""bench/scale/suite.py's arithmetic (hand-computed) and the overrides it hands every recipe script,
checked against the real config and dry run (no GPU: the suite itself runs on GPU nodes)."""

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from bench.scale.suite import (  # noqa: E402
    PROMPTS_PER_GPU,
    finished_steps,
    parse_args,
    run_name,
    run_overrides,
    settings_label,
    step_history,
    stop_note,
    suite_settings,
    summarise,
    update_flops,
)

TINY = {"hidden_size": 4, "num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 2, "num_key_value_heads": 1,
        "intermediate_size": 8, "vocab_size": 10}


def test_update_flops_by_hand():
    # per layer: 4·2·(2·2 + 2·1) = 48 attention-projection + 3·4·8 = 96 MLP params = 144; 2 layers = 288.
    # 100 tokens of rows of mean length 10 (10 rows): 6·288·100 = 172800 matmul;
    # attention 6·2 layers·2 heads·2 dims·10 rows·10² = 48000; head 6·10·4·30 response tokens = 7200.
    assert update_flops(TINY, tokens=100, mean_len=10, response_tokens=30) == 172800 + 48000 + 7200


def test_summary_takes_medians_after_step_one():
    history = {s: {"timing_s/step": 10.0 * s, "timing_s/gen": 4.0 * s, "timing_s/update_actor": 2.0,
                   "rollout/generated_tokens": 800.0, "perf/total_num_tokens": 1000.0, "prompt_length/mean": 4.0,
                   "response_length/mean": 6.0} for s in (1, 2, 3, 4)}
    result = summarise(history, gpus=2, config=TINY)
    assert result["median_step_s"] == 30.0 and result["stages_s"]["gen"] == 12.0  # steps 2-4: 20, 30, 40
    assert result["generated_tokens_per_s_per_gpu"] == pytest.approx(800 / 12 / 2)
    assert result["trained_tokens_per_s_per_gpu"] == pytest.approx(1000 / 30 / 2)
    assert result["update_mfu"] == pytest.approx(update_flops(TINY, 1000, 10, 800) / (2.0 * 2 * 989e12))


def test_summary_keeps_the_start_record_logged_with_the_first_step():
    history = {s: {"timing_s/step": 10.0} for s in (1, 2, 3)}
    history[0] = {"val/acc": 0.1}
    history[1] |= {"perf/start_s/ray_init": 5.0, "perf/start_s/total": 97.0}
    result = summarise(history, gpus=2, config=TINY)
    assert result["start_s"] == {"ray_init": 5.0, "total": 97.0}


@pytest.mark.parametrize("recipe", sorted(PROMPTS_PER_GPU))
def test_every_recipe_script_accepts_the_suite_overrides_at_two_gpus(recipe, tmp_path):
    from core.config import load_config
    from core.trainer.plan import make_plan

    overrides = run_overrides(recipe, "torchrun", 2, 3, ROOT / "bench/configs/qwen3-8b", tmp_path / "mlruns", "x")
    config = load_config(recipe, [*overrides, "trainer.n_gpus_per_node=2", "rollout.name=vllm"])
    plan = make_plan(config)
    assert plan["batch"]["prompts_per_step"] == 2 * PROMPTS_PER_GPU[recipe]
    assert plan["batch"]["optimizer_steps_per_step"] == 2


def test_the_time_limit_stops_the_whole_process_tree_and_keeps_the_run(tmp_path):
    """A real shell whose child outlives it unless its session is killed (as torchrun's ranks and vLLM's
    engines would): the limit stops both, and the caller gets stopped=True instead of an exception."""
    from bench.common.gpu_memory import run_logged, run_logged_until

    pid_file = tmp_path / "child.pid"
    command = ["bash", "-c", f"sleep 60 & echo $! > {pid_file}; echo started; wait"]
    wall, _, stopped = run_logged_until("tree", command, tmp_path / "tree.log", cwd=tmp_path, timeout_s=2)
    assert stopped and 2 <= wall < 20 and "started" in (tmp_path / "tree.log").read_text()
    assert _dead_within(int(pid_file.read_text()), seconds=5)
    with pytest.raises(RuntimeError, match="ran past its 1 s limit"):
        run_logged("tree", command, tmp_path / "again.log", cwd=tmp_path, timeout_s=1)
    with pytest.raises(RuntimeError, match="exited 3"):
        run_logged_until("fails", ["bash", "-c", "exit 3"], tmp_path / "fails.log", cwd=tmp_path, timeout_s=10)


def test_the_time_limit_kills_a_grandchild_that_started_a_session_of_its_own(tmp_path):
    """As torchrun's elastic agent starts each rank (start_new_session=True): killing the run's process group
    alone left the ranks alive on a GPU node, hung in NCCL and holding the GPUs for every later run."""
    from bench.common.gpu_memory import run_logged_until

    pid_file = tmp_path / "rank.pid"
    rank = f"echo $$ > {pid_file}.part && mv {pid_file}.part {pid_file} && exec sleep 300"
    agent = f"import subprocess, time; subprocess.Popen(['bash', '-c', {rank!r}], start_new_session=True); time.sleep(300)"
    _, _, stopped = run_logged_until("agent", [sys.executable, "-c", agent], tmp_path / "agent.log", cwd=tmp_path,
                                     timeout_s=3)
    rank_pid = int(pid_file.read_text())
    try:
        assert stopped
        assert _dead_within(rank_pid, seconds=5), f"pid {rank_pid} (the rank in its own session) outlived the limit"
    finally:
        with contextlib.suppress(ProcessLookupError):  # a survivor is not left sleeping for 5 minutes
            os.kill(rank_pid, signal.SIGKILL)


NOTES_SIGTERM = ("import pathlib, signal, sys, time\n"  # a process that touches the file argv[1] on SIGTERM, and goes on
                 "signal.signal(signal.SIGTERM, lambda *_: pathlib.Path(sys.argv[1]).touch())\ntime.sleep(300)")
GRACEFUL_RUN = """
import pathlib, signal, subprocess, sys, time

# As vLLM's engine (in the run's process group, noting SIGTERM) and a torchrun rank (in a session of its own).
children = [subprocess.Popen([sys.executable, "-c", sys.argv[1], "engine.term"]),
            subprocess.Popen(["sleep", "300"], start_new_session=True)]
pathlib.Path("children").write_text(" ".join(str(child.pid) for child in children))


def stop(*_):
    pathlib.Path("stopped").write_text("at the step boundary")
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
time.sleep(300)
"""


def test_a_grace_lets_the_run_stop_on_sigterm_and_still_kills_what_it_left(tmp_path):
    """The trainer writes its timeline on SIGTERM: the run gets it, its engine does not, and the children it
    leaves behind when it exits (now init's, out of its tree) are killed all the same."""
    from bench.common.gpu_memory import run_logged_until

    (tmp_path / "run.py").write_text(GRACEFUL_RUN)
    wall, _, stopped = run_logged_until("graceful", [sys.executable, "run.py", NOTES_SIGTERM], tmp_path / "run.log",
                                        cwd=tmp_path, timeout_s=3, grace_s=30)
    assert stopped and 3 <= wall < 15, (wall, (tmp_path / "run.log").read_text())
    assert (tmp_path / "stopped").read_text() == "at the step boundary"
    assert not (tmp_path / "engine.term").exists()  # SIGTERM went to the run alone, not its process group
    for pid in map(int, (tmp_path / "children").read_text().split()):
        assert _dead_within(pid, seconds=5), f"pid {pid} outlived the run"


def test_a_run_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    from bench.common.gpu_memory import run_logged_until

    wall, _, stopped = run_logged_until("deaf", [sys.executable, "-c", NOTES_SIGTERM, "term"], tmp_path / "deaf.log",
                                        cwd=tmp_path, timeout_s=3, grace_s=2)
    assert stopped and (tmp_path / "term").exists()  # it had SIGTERM, went on, and was killed: the call returned
    assert 5 <= wall < 15


def _dead_within(pid: int, seconds: float) -> bool:
    """Whether `pid` is gone or a zombie within `seconds`: a killed orphan waits for init (or a subreaper) to
    reap it, and a zombie still answers kill(pid, 0)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_a_run_stopped_before_its_mlflow_run_opened_has_no_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert step_history(tmp_path / "mlruns", "grpo_qwen3-8b_2gpu_ray") == {}
    assert finished_steps({}) == 0 and finished_steps({0: {"val/acc": 0.1}, 1: {"timing_s/step": 9.0}}) == 1
    assert stop_note(2, 3) == "after step 2 of 3" and stop_note(3, 3) == "after step 3 of 3 (in its shutdown)"


def test_the_report_says_where_the_time_limit_stopped_a_run():
    from bench.scale.report import step_cell

    assert step_cell({"median_step_s": 72.04, "stopped_by_time_limit": "after step 2 of 3"}) == \
        "72.0 (stopped by the time limit after step 2 of 3)"
    assert step_cell({"median_step_s": 45.4}) == "45.4"
    first_only = {"median_step_s": None, "stopped_by_time_limit": "after step 1 of 3", "steps": {"1": {
        "timing_s/step": 158.22, "timing_s/gen": 38.2, "timing_s/old_log_prob": 51.7,
        "timing_s/update_actor": 66.86, "timing_s/reward": 0.4}}}
    assert step_cell(first_only) == ("step 1 only: 158.2 (update_actor 66.9, old_log_prob 51.7, gen 38.2) "
                                     "(stopped by the time limit after step 1 of 3)")
    assert step_cell({"median_step_s": None, "steps": {}}) == "–"


def test_scaled_runs_default_to_expandable_segments_and_are_named_so():
    """The suite's scaled settings carry SUITE_DEFAULTS: the same name and settings as the runs made with
    `--tag expandable actor.expandable_segments=true` before they were the default."""
    assert suite_settings("", [], full=False) == ("expandable", ["actor.expandable_segments=true"])
    assert suite_settings("", ["actor.expandable_segments=true"], full=False) == \
        ("expandable", ["actor.expandable_segments=true"])  # given once, not twice
    assert suite_settings("levers", ["actor.micro_batch_tokens=8192"], full=False) == \
        ("levers", ["actor.expandable_segments=true", "actor.micro_batch_tokens=8192"])
    # turned off: by the flag (the older runs' name and settings), or by an override (then no default tag)
    assert suite_settings("", [], full=False, with_defaults=False) == ("", [])
    assert suite_settings("", ["actor.expandable_segments=false"], full=False) == \
        ("", ["actor.expandable_segments=false"])
    assert suite_settings("", [], full=True) == ("", [])  # --full: the script's own settings
    args = parse_args(["--recipes", "grpo"])
    tag, overrides = suite_settings(args.tag, args.overrides, args.full, not args.no_expandable_segments)
    assert settings_label(args.full, overrides) == "scaled + actor.expandable_segments=true"
    assert run_name("grpo", Path("/w/model-qwen3-8b"), 2, "torchrun", tag) == "grpo_qwen3-8b_2gpu_torchrun_expandable"


def test_a_tagged_run_is_named_apart_from_the_untagged_one():
    args = parse_args(["--recipes", "grpo", "--tag", "expandable", "actor.expandable_segments=true"])
    assert args.overrides == ["actor.expandable_segments=true"]
    model = Path("/w/model-qwen3-8b")
    assert run_name("grpo", model, 2, "torchrun", args.tag) == "grpo_qwen3-8b_2gpu_torchrun_expandable"
    assert run_name("grpo", model, 2, "torchrun") == "grpo_qwen3-8b_2gpu_torchrun"


def test_the_report_table_states_each_runs_start():
    from bench.scale.report import table

    run = {"recipe": "grpo", "gpus": 2, "controller": "ray", "settings": "scaled", "median_step_s": 46.6,
           "start_s": {"ray_init": 10.1, "total": 148.48}, "stages_s": {"gen": 14.4}, "peak_memory_gib": [126.2, 135.7],
           "memory_total_gib": [140.4, 140.4], "generated_tokens_per_s_per_gpu": 11375.1,
           "trained_tokens_per_s_per_gpu": 3794.2, "update_mfu": 0.407}
    header, _, row = table([run])
    assert "| step s | start s |" in header and "| 46.6 | 148 | 14.4 |" in row


def test_generation_speed_counts_a_recipes_untrained_tokens():
    """ReMax's greedy baseline is generated in the gen stage but not trained on: 800 sampled + 200 greedy
    tokens in 10 s on 2 GPUs is 50 tokens/s/GPU; the trained-token rate still counts the trained batch only."""
    history = {s: {"timing_s/step": 20.0, "timing_s/gen": 10.0, "timing_s/update_actor": 5.0,
                   "rollout/generated_tokens": 800.0, "rollout/baseline_tokens": 200.0,
                   "perf/total_num_tokens": 1000.0} for s in (1, 2)}
    result = summarise(history, gpus=2, config=TINY)
    assert result["generated_tokens_per_s_per_gpu"] == pytest.approx(1000 / 10 / 2)
    assert result["trained_tokens_per_s_per_gpu"] == pytest.approx(1000 / 20 / 2)
    assert result["update_mfu"] == pytest.approx(update_flops(TINY, 1000, 0, 800) / (5.0 * 2 * 989e12))


def test_a_step_target_says_what_update_mfu_it_needs():
    """A 60 s DAPO step: update 30 s at 40% MFU (12 s at 100%), old-policy pass 8 s, so the rest is 22 s. At 45%
    MFU the update takes 12 / 0.45 = 26.7 s: 48.7 s without the old-policy pass. A 45 s step leaves the update
    45 − 22 = 23 s: 12 / 23 = 52% MFU. A rest of 50 s alone exceeds 45: unreachable."""
    from bench.scale.report import step_targets

    run = {"recipe": "dapo", "gpus": 2, "controller": "torchrun", "median_step_s": 60.0, "update_mfu": 0.4,
           "stages_s": {"update_actor": 30.0, "old_log_prob": 8.0}}
    row = step_targets([run])[-1]
    assert row == "| dapo | torchrun | scaled | 60.0 | 22.0 | 30.0 (40.0%) | 48.7 | 45 | 52% |"
    slow = {**run, "median_step_s": 88.0}
    assert step_targets([slow])[-1].endswith("| unreachable (the rest alone exceeds it) |")
    assert step_targets([{**run, "recipe": "grpo"}]) == []  # no target: no section
