"""bench/perf/pyspy_stages.py: a py-spy raw profile split into the parts of a training job, counted by hand."""

import json

from bench.perf.pyspy_stages import main

JOB = 'process 10:"python3 -m bench.leaderboard.job --recipe grpo"'
ROWS = [
    ("process 1:\"driver\";main (driver.py:1)", 500),  # another process: not counted
    (f"{JOB};BaseTrainer.fit (base.py:60);SyncSchedule.next_rollout (schedule.py:61);"
     "EngineCore.step (core.py:1);LogprobsLists.slice_request (outputs.py:45)", 20),
    (f"{JOB};BaseTrainer.fit (base.py:60);SyncSchedule.next_rollout (schedule.py:61);EngineCore.step (core.py:1)", 60),
    (f"{JOB};BaseTrainer.fit (base.py:60);SyncSchedule.next_rollout (schedule.py:61);rollout_from_token_lists (b:1)", 20),
    (f"{JOB};BaseTrainer.fit (base.py:60);BaseTrainer.validate (base.py:231);"
     "OutputProcessor.process_outputs (o:1);LogprobsProcessor.update_from_output (l:1)", 10),
    (f"{JOB};BaseTrainer.fit (base.py:60);BaseTrainer.validate (base.py:231);EngineCore.step (core.py:1)", 40),
    (f"{JOB};BaseTrainer.fit (base.py:60);BaseTrainer.update_policy (base.py:171)", 25),
    (f'{JOB};Popen (subprocess.py:1);process 11:"compile_worker";run (w:1)', 5),
]


def test_parts_and_the_log_prob_share_are_counted_per_process(tmp_path):
    profile = tmp_path / "spy.txt"
    profile.write_text("".join(f"{stack} {count}\n" for stack, count in ROWS))
    out = tmp_path / "summary.json"
    assert main([str(profile), "--process", "bench.leaderboard.job", "--rate", "10", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["sampled_seconds"] == 18.0  # 180 samples of the job at 10 Hz; the driver's 500 left out
    assert summary["parts_s"] == {"training generation": 10.0, "validation": 5.0, "update_actor": 2.5,
                                  "child processes": 0.5}
    assert summary["generation_s"]["training generation"] == {
        "engine core: schedule, model, sample": 6.0, "log-prob bookkeeping": 2.0, "rollout backend and the rest": 2.0}
    assert summary["log_prob_bookkeeping_share"] == {"training generation": 0.2, "validation": 0.2}
