"""The leaderboard driver's time budget (bench/leaderboard/driver.py, run_jobs): a queued job starts only with the
time it needs left before --time-limit-s, so that a run is never stopped short of its budget. start_job and
finish_job are replaced by fakes that finish at once with a given duration: no process is started."""

from __future__ import annotations

import json
import re
import time

from bench.leaderboard import driver, job_runner


def test_a_job_is_not_started_with_less_than_min_job_s_left(tmp_path, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(job_runner, "start_job", lambda job, *rest: started.append(job.name))
    args = driver.parse_args(["--runs-per-gpu", "2", "--min-job-s", "400"])
    jobs = [job_runner.Job("grpo-seed0", "grpo", 0), job_runner.Job("ppo-seed0", "ppo", 0)]
    job_runner.run_jobs(jobs, args, tmp_path, "file:///store", ["0"], lambda job: [], time.time() + 399, {})
    assert started == [] and [job.status for job in jobs] == ["not started"] * 2
    assert capsys.readouterr().out.count("too little time left") == 2
    # Without --min-job-s, the evaluation reserve and one step's time (120 + 90 s) are enough to start.
    assert driver.parse_args([]).min_job_s is None


def test_a_job_is_not_started_with_less_time_left_than_a_finished_job_took(tmp_path, monkeypatch, capsys):
    """--min-job-s 150, but the first job took 300 s to train every step: with 250 s left the next one,
    which would be stopped short of the budget, waits for a rerun instead."""
    started = []

    def start(job, *rest):
        started.append(job.name)
        job.started, job.process = time.time() - 300, type("Done", (), {"poll": lambda self: 0})()

    def finish(job, *rest):
        job.ended, job.status = job.started + 300, "done"

    monkeypatch.setattr(job_runner, "start_job", start)
    monkeypatch.setattr(job_runner, "finish_job", finish)
    args = driver.parse_args(["--min-job-s", "150", "--runs-per-gpu", "1"])
    jobs = [job_runner.Job("grpo-seed0", "grpo", 0), job_runner.Job("ppo-seed0", "ppo", 0)]
    job_runner.run_jobs(jobs, args, tmp_path, "file:///store", ["0"], lambda job: [], time.time() + 250, {})
    assert started == ["grpo-seed0"] and [job.status for job in jobs] == ["done", "not started"]
    expected = (r"not starting ppo-seed0: too little time left before --time-limit-s \(it needs 300 s, 2(49|50) s "
                r"are left once the final 60 s for stopping and exporting are kept\)")
    assert re.search(expected, capsys.readouterr().out)


def test_a_job_is_not_started_with_less_time_left_than_an_earlier_invocations_job_took(tmp_path, monkeypatch, capsys):
    """An earlier invocation in --out ran a GRPO pass@k job of 40 steps, 4 a GPU on the same GPUs, in 451 s: with
    400 s left a new one would be stopped short, so it is not started, while a recipe that took less still starts;
    other steps, jobs per GPU or GPUs say nothing."""
    from bench.leaderboard.bookkeeping import earlier_job_seconds

    def record(name, runs_per_gpu, device, jobs):
        (tmp_path / "invocations").mkdir(exist_ok=True)
        (tmp_path / "invocations" / name).write_text(json.dumps(
            {"runs_per_gpu": runs_per_gpu, "devices": {"0": device, "1": device}, "jobs": jobs}))

    done = {"status": "done", "recipe": "grpo_passk", "steps": 40, "seconds": 451.2}
    record("a.json", 4, "H200", [done, {**done, "seconds": 300.0}, {**done, "status": "stopped", "seconds": 900},
                                 {**done, "recipe": None, "seconds": 800}, {**done, "steps": 16, "seconds": 700}])
    record("b.json", 3, "H200", [{**done, "seconds": 999}])  # another K
    record("c.json", 4, "H100", [{**done, "seconds": 998}])  # other GPUs
    record("d.json", 4, "H200", [{**done, "recipe": "gspo", "seconds": 320.0}])
    assert earlier_job_seconds([tmp_path], 40, 4, {"H200"}) == {"grpo_passk": 451.2, "gspo": 320.0}
    assert earlier_job_seconds([tmp_path], 80, 4, {"H200"}) == {}
    started = []

    def start(job, *rest):
        started.append(job.name)
        job.started, job.process = time.time(), type("Done", (), {"poll": lambda self: 0})()

    monkeypatch.setattr(job_runner, "start_job", start)
    def finish(job, *rest):
        job.ended, job.status = job.started + 100, "done"

    monkeypatch.setattr(job_runner, "finish_job", finish)
    args = driver.parse_args(["--runs-per-gpu", "4", "--min-job-s", "250", "--steps", "40"])
    jobs = [job_runner.Job("grpo_passk-seed3", "grpo_passk", 3), job_runner.Job("gspo-seed3", "gspo", 3),
            job_runner.Job("grpo-seed3", "grpo", 3)]
    job_runner.run_jobs(jobs, args, tmp_path, "file:///store", ["0"], lambda job: [], time.time() + 400, {"0": "H200"})
    # pass@k took 451 s before: not started; GSPO (320 s) and GRPO (no record: --min-job-s) start.
    assert started == ["gspo-seed3", "grpo-seed3"] and jobs[0].status == "not started"
    assert "not starting grpo_passk-seed3: too little time left before --time-limit-s (it needs 451 s, " \
        in capsys.readouterr().out


class Process:
    """A job's process that reports it still runs for `polls_running` polls, then that it ended."""

    def __init__(self, polls_running: int):
        self.polls_running = polls_running

    def poll(self):
        self.polls_running -= 1
        return None if self.polls_running >= 0 else 0


def run_pass_at_k_and_grpo(tmp_path, monkeypatch, polls_running: dict[str, int]) -> tuple[list, list]:
    """Two GRPO pass@k jobs and two GRPO jobs, 2 a GPU, 400 s left: pass@k's take 600 s, GRPO's 300 s, each
    ending at its first poll or after `polls_running[name]` polls. Returns (the names started, the jobs)."""
    started, took = [], {"grpo_passk": 600, "grpo": 300}

    def start(job, *rest):
        started.append(job.name)
        job.started, job.process = time.time(), Process(polls_running.get(job.name, 0))

    def finish(job, *rest):
        job.ended, job.status = job.started + took[job.variant], "done"

    monkeypatch.setattr(job_runner, "start_job", start)
    monkeypatch.setattr(job_runner, "finish_job", finish)
    args = driver.parse_args(["--runs-per-gpu", "2", "--min-job-s", "150"])
    jobs = [job_runner.Job("grpo_passk-seed0", "grpo_passk", 0), job_runner.Job("grpo-seed0", "grpo", 0),
            job_runner.Job("grpo-seed1", "grpo", 1), job_runner.Job("grpo_passk-seed1", "grpo_passk", 1)]
    job_runner.run_jobs(jobs, args, tmp_path, "file:///store", ["0"], lambda job: [], time.time() + 400, {})
    return started, jobs


def test_a_job_needs_the_time_its_own_recipe_took_once_one_finished(tmp_path, monkeypatch, capsys):
    """GRPO pass@k took 600 s and GRPO 300 s: with 400 s left a second GRPO job starts (it needs its own recipe's
    300 s, not pass@k's 600) and a second pass@k job does not."""
    started, jobs = run_pass_at_k_and_grpo(tmp_path, monkeypatch, {})
    assert started == ["grpo_passk-seed0", "grpo-seed0", "grpo-seed1"] and jobs[3].status == "not started"
    assert "not starting grpo_passk-seed1: too little time left before --time-limit-s (it needs 600 s, " \
        in capsys.readouterr().out


def test_a_job_too_long_by_another_recipes_time_waits_for_its_own_running_one(tmp_path, monkeypatch, capsys):
    """GRPO pass@k finished first (600 s) while GRPO's first job still ran: with 400 s left the second GRPO job,
    too long only by pass@k's time, waits in the queue (pass@k's second job, behind it, is decided at once: not
    started) and starts once its own recipe's job finished in 300 s. The old driver dropped it."""
    started, jobs = run_pass_at_k_and_grpo(tmp_path, monkeypatch, {"grpo-seed0": 2})
    assert started == ["grpo_passk-seed0", "grpo-seed0", "grpo-seed1"]
    assert [job.status for job in jobs] == ["done", "done", "done", "not started"]
    assert "not starting grpo-seed1" not in capsys.readouterr().out


def jobs_that_take(monkeypatch, seconds: float, eval_s: float) -> list[str]:
    """start_job and finish_job replaced: every job ends at once as if it had run `seconds`, `eval_s` of them
    evaluating. Returns the list the started jobs' names are appended to."""
    started = []

    def start(job, *rest):
        started.append(job.name)
        job.started, job.process = time.time(), type("Done", (), {"poll": lambda self: 0})()

    def finish(job, *rest):
        job.ended, job.status, job.summary = job.started + seconds, "done", {"eval_s": eval_s}

    monkeypatch.setattr(job_runner, "start_job", start)
    monkeypatch.setattr(job_runner, "finish_job", finish)
    return started


def test_a_job_needs_its_time_up_to_its_evaluation_plus_the_reserve(tmp_path, monkeypatch, capsys):
    """Training stops --reserve-s before the deadline, however short the evaluation: a GSPO job of 361 s whose
    evaluation took 69 s needs 361 - 69 + 240 = 532 s left under --reserve-s 240. With 450 s left a Dr.GRPO job
    (costed at GSPO's time) is not started; the old driver started it on 361 s and its training was stopped at
    50-57 of 64 steps. An earlier invocation's job is costed the same way."""
    from bench.leaderboard.bookkeeping import earlier_job_seconds, time_needed_s

    assert time_needed_s(361, 69, 240) == 532 and time_needed_s(361, 300, 240) == 361
    assert time_needed_s(361, None, 240) == 361
    started = jobs_that_take(monkeypatch, 361, 69.0)
    args = driver.parse_args(["--runs-per-gpu", "1", "--min-job-s", "150", "--reserve-s", "240"])
    jobs = [job_runner.Job("gspo-seed1", "gspo", 1), job_runner.Job("drgrpo-seed1", "drgrpo", 1)]
    job_runner.run_jobs(jobs, args, tmp_path, "file:///store", ["0"], lambda job: [], time.time() + 450, {})
    assert started == ["gspo-seed1"] and jobs[1].status == "not started"
    assert "not starting drgrpo-seed1: too little time left before --time-limit-s (it needs 532 s, " \
        in capsys.readouterr().out
    (tmp_path / "invocations").mkdir()
    (tmp_path / "invocations" / "a.json").write_text(json.dumps({"runs_per_gpu": 1, "devices": {"0": "H200"}, "jobs": [
        {"status": "done", "recipe": "gspo", "steps": 64, "seconds": 361.0, "eval_s": 69.0}]}))
    assert earlier_job_seconds([tmp_path], 64, 1, {"H200"}, 240) == {"gspo": 532.0}


def test_a_recipe_known_from_timings_from_is_judged_by_its_own_time(tmp_path, monkeypatch, capsys):
    """This happened: GRPO pass@k's jobs (743 s) finished first, and three Dr.GRPO jobs, whose recipe no job here
    had run, were judged by that time (798 s needed, 651 s left) and not started, though Dr.GRPO's earlier jobs had
    needed about 300 s. With --timings-from the merged table's records, Dr.GRPO is judged by its own: those jobs
    were stopped by their budget after 57 of 64 steps, so their training is stretched to 64 (full_job_seconds)."""
    from bench.leaderboard.bookkeeping import full_job_seconds

    stopped = {"status": "stopped", "recipe": "drgrpo", "steps": 57, "seconds": 290.0, "train_s": 171.0,
               "eval_s": 77.0}
    assert full_job_seconds(stopped, 64) == 290.0 + 171.0 * 7 / 57  # 311 s
    assert full_job_seconds({**stopped, "train_s": None}, 64) is None and full_job_seconds(stopped, 57) is None
    merged = tmp_path / "merged"
    (merged / "invocations").mkdir(parents=True)
    (merged / "invocations" / "a.json").write_text(json.dumps(
        {"runs_per_gpu": 1, "devices": {"0": "H200"}, "jobs": [stopped]}))
    started = jobs_that_take(monkeypatch, 743, 95.0)
    for timings in ([], ["--timings-from", str(merged)]):
        started.clear()
        args = driver.parse_args(["--runs-per-gpu", "1", "--min-job-s", "200", "--reserve-s", "150", "--steps", "64",
                                  *timings])
        jobs = [job_runner.Job("grpo_passk-seed4", "grpo_passk", 4), job_runner.Job("drgrpo-seed1", "drgrpo", 1)]
        job_runner.run_jobs(jobs, args, tmp_path / "out", "file:///store", ["0"], lambda job: [], time.time() + 700,
                        {"0": "H200"})
        # without the records Dr.GRPO needs pass@k's 743 - 95 + 150 = 798 s; with them 311 - 77 + 150 = 384 s
        assert started == (["grpo_passk-seed4"] if not timings else ["grpo_passk-seed4", "drgrpo-seed1"])
    assert "not starting drgrpo-seed1: too little time left before --time-limit-s (it needs 798 s" \
        in capsys.readouterr().out
