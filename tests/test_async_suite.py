"""bench/async_rl/suite.py and bench/async_rl/report.py: the suite runs sync and one_step_off on the tiny model and
each run's json holds its timeline; a run the time limit stops keeps its steps; the report's arithmetic on made-up
runs, by hand; what the suite refuses before anything runs."""


import pytest
import torch

from bench.async_rl import report as async_report
from bench.async_rl import suite as async_suite

TINY = ["--controller", "local", "--prompts", "4", "--n", "2", "--response-length", "8", "--steps", "2"]


def test_the_suite_runs_sync_and_one_step_off_and_the_report_reads_them(tmp_path):
    out = tmp_path / "results" / "cpu_tiny"
    assert async_suite.main([*TINY, "--schedules", "sync", "one_step_off", "--work", str(tmp_path / "work"),
                             "--out", str(out)]) == 0
    runs = {run["name"]: run for run in async_report.load_folders(tmp_path / "results")[out]}
    assert list(runs) == ["sync", "one_step_off"]
    for run in runs.values():
        timeline = run["timeline"]
        assert timeline["devices"] == ["cpu:0", "host"] and [s["step"] for s in timeline["steps"]] == [1, 2]
        assert {"generate", "update_actor", "sync_weights", "reward"} <= {s["stage"] for s in timeline["spans"]}
    # one_step_off's step 2 trains on the batch generated beside step 1, one weight version old.
    assert runs["one_step_off"]["steps"]["2"]["rollout_corr/staleness/frac_1"] == 1.0
    assert async_report.main(["--results", str(tmp_path / "results")]) == 0
    page = (tmp_path / "results" / "README.md").read_text()
    assert "| sync | sync | 1 (colocated) | 2 |" in page and "| one_step_off | one_step_off |" in page
    assert (tmp_path / "results" / "timeline.png").stat().st_size > 0


def test_a_run_the_time_limit_stops_keeps_the_steps_it_made(tmp_path, capsys):
    """The tiny run reaches its first step about 7 s after it starts on 2 cores (25 s leave room for a slower CI
    machine), and cannot make 10000 steps in 25 s: SIGTERM at the limit ends it at a step boundary, and its json
    holds the steps it made."""
    out = tmp_path / "results" / "cpu_tiny"
    args = [*TINY, "--steps", "10000", "--timeout-s", "25", "--stop-grace-s", "30", "--schedules", "sync"]
    assert async_suite.main([*args, "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    run = async_report.load_folders(tmp_path / "results")[out][0]
    last = max(step["step"] for step in run["timeline"]["steps"])
    assert run["stopped_by_time_limit"] == f"after step {last} of 10000" and last >= 1
    assert f"[async] sync: {last} steps in" in capsys.readouterr().out
    assert sorted(map(int, run["steps"])) == list(range(1, last + 1))  # MLflow holds the same steps
    assert async_report.main(["--results", str(tmp_path / "results")]) == 0
    assert f" (stopped by the time limit after step {last} of 10000) |" in (tmp_path / "results" / "README.md").read_text()


def test_a_run_the_time_limit_stops_before_its_first_step_stops_the_suite(monkeypatch, tmp_path):
    args = async_suite.parse_args([*TINY, "--timeout-s", "5", "--work", str(tmp_path), "--out", str(tmp_path / "out")])
    setup = async_suite.Setup(args, tmp_path, [])
    stale = tmp_path / "outputs" / "sync" / "timeline.json"  # an earlier suite's run of the same name
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "sync.log").write_text("building the model\n")
    monkeypatch.setattr(async_suite, "run_logged_until", lambda *args, **kwargs: (5.0, None, True))
    with pytest.raises(RuntimeError, match="sync ran past its 5 s limit before its first step ended; log .*\n"
                                           "building the model"):
        async_suite.run_one(setup, async_suite.plan_runs(args, 1)[0], args, "CPU")


def span(role, stage, start, end, *devices):
    return {"role": role, "stage": stage, "step": 0, "start": start, "end": end, "devices": list(devices)}


def made_up_run(name, schedule, placement, windows, spans, staleness, max_staleness=None):
    """2 GPUs; every step trains on 1000 tokens, 400 of them generated."""
    steps = {str(step): {"perf/total_num_tokens": 1000.0, "rollout/generated_tokens": 400.0,
                         **{f"rollout_corr/staleness/frac_{v}": share for v, share in staleness[step - 1].items()}}
             for step in range(1, len(windows) + 1)}
    return {"name": name, "schedule": schedule, "placement": placement, "gpus": 2, "rollout_gpus": 1,
            "train_gpus": 1 if placement == "disaggregated" else 2, "max_staleness": max_staleness, "steps": steps,
            "timeline": {"devices": ["cuda:0", "cuda:1", "host"], "spans": spans,
                         "steps": [{"step": s, "start": a, "end": b} for s, (a, b) in enumerate(windows, 1)]}}


SYNC = made_up_run(  # steps 2-3 steady, 10 s each; cuda:0 busy 9 of 10 s, cuda:1 5 of 10 s
    "sync", "sync", "colocated", [(0, 10), (10, 20), (20, 30)],
    [span("rollout", "generate", 10, 14, "cuda:0"), span("train", "update_actor", 14, 19, "cuda:0", "cuda:1"),
     span("rollout", "generate", 20, 24, "cuda:0"), span("train", "update_actor", 24, 29, "cuda:0", "cuda:1"),
     span("host", "reward", 14, 15, "host")],
    [{0: 1.0}] * 3)
ASYNC = made_up_run(  # bound 1 of 4 steps: steps 2-3 steady, 5 s each
    "async_1+1", "async", "disaggregated", [(0, 10), (10, 15), (15, 20), (20, 30)],
    [span("train", "update_actor", 10, 14, "cuda:0"), span("train", "update_actor", 15, 19, "cuda:0"),
     span("rollout", "generate", 9, 16, "cuda:1"), span("rollout", "generate", 16, 20, "cuda:1")],
    [{0: 1.0, 1: 0.0}, {0: 0.0, 1: 1.0}, {0: 0.0, 1: 1.0}, {0: 0.0, 1: 1.0}], max_staleness=1)


def test_the_report_arithmetic_by_hand():
    sync = async_report.summarise(SYNC, None)
    assert async_report.measured_steps(SYNC) == [2, 3] and sync["step_s"] == 10.0
    assert sync["busy"] == pytest.approx({"cuda:0": 0.9, "cuda:1": 0.5})
    assert sync["trained_tok_s_gpu"] == 2000 / 20 / 2 and sync["generated_tok_s_gpu"] == 800 / 20 / 2
    assert async_report.measured_steps(ASYNC) == [2, 3]  # step 4 has no later batch to generate beside it
    fast = async_report.summarise(ASYNC, sync_step_s=10.0)
    assert fast["step_s"] == 5.0 and fast["speed_up"] == 2.0 and fast["trained_tok_s_gpu"] == 2000 / 10 / 2
    # cuda:1's first generation started before step 2 and ran 1 s into step 3: 5 + (1 + 4) of 10 s.
    assert fast["busy"] == pytest.approx({"cuda:0": 0.8, "cuda:1": 1.0})
    assert fast["staleness"] == {0: 0.25, 1: 0.75}
    assert async_report.busy_cell(ASYNC, fast["busy"]) == "cuda:0 train 80%, cuda:1 rollout 100%"
    assert async_report.staleness_cell(fast["staleness"]) == "0: 25%, 1: 75%"


def test_a_run_the_time_limit_stopped_is_measured_on_its_steps_and_says_so():
    """ASYNC stopped after its step 3 of 4: its steady steps end at 3 − 1 = 2, and its row says where it stopped."""
    stopped = {**ASYNC, "stopped_by_time_limit": "after step 3 of 4",
               "timeline": {**ASYNC["timeline"], "steps": ASYNC["timeline"]["steps"][:3]}}
    assert async_report.measured_steps(stopped) == [2]
    assert async_report.steps_cell(stopped) == "2 (stopped by the time limit after step 3 of 4)"
    assert async_report.steps_cell({**SYNC, "stopped_by_time_limit": None}) == "2-3"
    assert async_report.steps_cell(SYNC) == "2-3"  # the jsons of suites before the key


def test_the_stages_of_a_colocated_off_policy_run_read_against_syncs_by_hand():
    """Generation in the background (its own metric) beside sync's generation, over the steady steps 2-3: a
    colocated schedule whose stages each take longer than alone shares a device that was already busy."""
    def timed(run, stages):
        steps = {step: {**metrics, **{f"timing_s/{key}": value for key, value in stages[step].items()}}
                 for step, metrics in run["steps"].items()}
        return {**run, "steps": steps}

    sync = timed(SYNC, {"1": {"gen": 9.0}, "2": {"gen": 4.0, "old_log_prob": 1.0, "update_actor": 5.0},
                        "3": {"gen": 4.0, "old_log_prob": 1.0, "update_actor": 5.0}})
    off = timed({**SYNC, "name": "one_step_off", "schedule": "one_step_off"},
                {"1": {"gen": 9.0}, "2": {"gen": 0.0, "gen_background": 7.0, "old_log_prob": 2.0, "update_actor": 6.0},
                 "3": {"gen": 0.0, "gen_background": 9.0, "old_log_prob": 2.0, "update_actor": 8.0}})
    off["timeline"] = {**off["timeline"], "steps": off["timeline"]["steps"] + [{"step": 4, "start": 30, "end": 40}]}
    assert async_report.stage_seconds(sync) == {"generation": 4.0, "old log-probs": 1.0, "update": 5.0}
    assert async_report.stages_note(off, sync) == (" Its stages, each on its own clock, overlapping: generation 8 s "
                                                   "(sync 4), old log-probs 2 s (sync 1), update 7 s (sync 5).")
    assert async_report.stages_note(ASYNC, sync) == ""  # disaggregated: its stages run on other devices


def test_the_memory_cell_reads_each_gpus_peak_and_the_total_where_the_json_has_it():
    assert async_report.memory_cell({"peak_memory_gib": [100.674, 98.0], "memory_total_gib": [140.4, 140.4]}) == \
        "100.7 / 98.0 of 140.4"
    assert async_report.memory_cell({"peak_memory_gib": [77.12]}) == "77.1"  # a suite's json before the totals
    assert async_report.memory_cell({"peak_memory_gib": []}) == "–"  # a CPU run


def test_a_split_the_node_cannot_hold_is_refused_before_anything_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(SystemExit) as info:
        async_suite.main([*TINY, "--splits", "1+1", "1+3", "--work", str(tmp_path), "--out", str(tmp_path / "out")])
    assert str(info.value) == ("async_suite: --splits: async_1+3 needs 4 GPUs (1 rollout + 3 train), and this node "
                               "has 2 — lower it")
    assert not (tmp_path / "out").exists()


def test_a_recipe_that_cannot_run_off_policy_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(SystemExit) as info:
        async_suite.main([*TINY, "--schedules", "one_step_off", "--work", str(tmp_path), "--out",
                          str(tmp_path / "out"), "algorithm.adv_estimator=remax"])
    assert str(info.value).startswith("async_suite: one_step_off's dry run refused its config: recipezoo: config "
                                      "error: algorithm.adv_estimator='remax' with trainer.schedule=one_step_off")
    assert not (tmp_path / "out").exists()
