"""`trainer.schedule=one_step_off` for real (local controller, HF rollout in a background thread):
its rollouts are exactly one weight version old, its data order and checkpoints are the synchronous
run's, and the off-policy correction weighs its tokens as computed by hand."""

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.cli import main
from core.config import ConfigError, load_config
from core.trainer.checkpoint import latest_checkpoint, read_trainer_state
from core.trainer.config_checks import validate_config
from core.trainer.metrics import staleness_metrics
from core.trainer.schedule import DEFAULT_MAX_STALENESS, SCHEDULES, AsyncSchedule
from recipes.grpo.trainer import GRPOTrainer

STEPS = 3
VARIED_REWARD = ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                 "    return (sum(map(ord, solution_str)) % 7) / 6  # varies, so every step changes the weights\n")


def record_run(model_dir, tmp_path, schedule):
    """Fit `STEPS` steps; per step: the logged metrics and the batch the policy update received."""
    reward = tmp_path / "varied_reward.py"
    reward.write_text(VARIED_REWARD)
    config = load_config("grpo", [
        f"model.path={model_dir}", "trainer.test_freq=0", "data.train_batch_size=4", "actor.ppo_mini_batch_size=2",
        "rollout.n=2", "data.max_response_length=6", "tracking.backends=[console]", f"trainer.total_steps={STEPS}",
        f"trainer.schedule={schedule}", "trainer.save_freq=2",  # async: the default bound of 2
        f"reward.custom_function.path={reward}", "algorithm.rollout_correction.mode=tis",
        "algorithm.rollout_correction.tis_cap=1.001", "actor.lr=0.01",
        f"trainer.output_dir={tmp_path}/{schedule}"])
    trainer = GRPOTrainer(config)
    logged, updated, spans = {}, {}, []  # spans: (what, step, thread, start, end)
    log, update, generate = trainer.tracking.log_metrics, trainer.update_policy, trainer.actor_rollout.generate

    def record_log(metrics, step):
        logged.setdefault(step, {}).update(metrics)
        log(metrics, step=step)

    def timed(what, method, *args):
        step, start = trainer.global_step, time.perf_counter()
        result = method(*args)
        spans.append((what, step, threading.current_thread().name, start, time.perf_counter()))
        return result

    def record_update(batch):
        updated[trainer.global_step] = batch
        return timed("update", update, batch)

    trainer.tracking.log_metrics, trainer.update_policy = record_log, record_update
    trainer.actor_rollout.generate = lambda prompts, params: timed("generate", generate, prompts, params)
    trainer.fit()
    return logged, updated, spans


@pytest.fixture(scope="module")
def runs(random_model_dir, tmp_path_factory):
    """The same 3 steps under each schedule (module-scoped: three runs serve every test below)."""
    tmp_path = tmp_path_factory.mktemp("schedules")
    return {schedule: record_run(random_model_dir, tmp_path, schedule) for schedule in SCHEDULES}, tmp_path


def test_one_step_off_trains_every_step_after_the_first_on_rollouts_one_version_old(runs):
    logged, updated, _ = runs[0]["one_step_off"]
    staleness = [logged[step]["rollout_corr/staleness/max"] for step in range(1, STEPS + 1)]
    assert staleness == [0, 1, 1], "the bound is 1 version, and every prefetched batch must reach it"
    assert [logged[step]["rollout_corr/staleness/frac_1"] for step in range(1, STEPS + 1)] == [0, 1, 1]
    # Step k's rollouts come from the weights after k-2 syncs: none at steps 1 and 2, one at step 3.
    assert [set(updated[step]["policy_version"]) for step in range(1, STEPS + 1)] == [{0}, {0}, {1}]
    sync_logged = runs[0]["sync"][0]
    assert all(sync_logged[step]["rollout_corr/staleness/max"] == 0 for step in range(1, STEPS + 1))


def test_async_keeps_every_rollout_within_max_staleness_and_the_data_order(runs):
    results, tmp_path = runs
    logged, updated, _ = results["async"]
    staleness = [logged[step]["rollout_corr/staleness/max"] for step in range(1, STEPS + 1)]
    # Step 1 on the spot; steps 2 and 3 were both drawn at step 1, step 3's batch 2 versions before it trains
    # at the latest. Over the bound the run itself fails (see test_a_rollout_older_than_the_bound...).
    assert staleness[:2] == [0, 1] and 1 <= staleness[2] <= 2
    for step in range(1, STEPS + 1):
        assert list(updated[step]["index"]) == list(results["sync"][1][step]["index"]), step
    saved = read_trainer_state(tmp_path / "async" / "checkpoints" / "global_step_2")["loader"]
    assert saved == read_trainer_state(tmp_path / "sync" / "checkpoints" / "global_step_2")["loader"]


def test_the_next_steps_generation_runs_in_a_background_thread_beside_the_step(runs):
    spans = runs[0]["one_step_off"][2]
    generated = sorted((start, step, thread) for what, step, thread, start, _ in spans if what == "generate")
    update_end = {step: end for what, step, _, _, end in spans if what == "update"}
    main = threading.main_thread().name
    # Step 1 generates its own batch on the spot; steps 1 and 2 each prefetch the next step's batch in the
    # background, starting before their own update has finished; the last step prefetches nothing.
    assert [(step, thread == main) for _, step, thread in generated] == [(1, True), (1, False), (2, False)]
    for start, step, thread in generated[1:]:
        assert thread.startswith("rollout") and start < update_end[step]


def test_the_lag_shows_in_the_rollout_log_probs_and_the_weights_follow_them(runs):
    (_, updated, _), (_, sync_updated, _) = runs[0]["one_step_off"], runs[0]["sync"]

    def gap(batch):
        return (batch["old_log_probs"] - batch["rollout_log_probs"]).abs().max().item()

    # On-policy, fp32 on both sides: π_old and π_rollout agree; one step off they do not.
    assert max(gap(sync_updated[step]) for step in range(1, STEPS + 1)) < 1e-4
    assert gap(updated[1]) < 1e-4 and gap(updated[2]) > 1e-3 and gap(updated[3]) > 1e-3
    for step in range(1, STEPS + 1):
        batch = updated[step]
        expected = torch.exp(batch["old_log_probs"] - batch["rollout_log_probs"]).clamp(max=1.001)
        torch.testing.assert_close(batch["rollout_is_weights"], expected * batch["response_mask"])


def test_one_step_off_trains_on_the_synchronous_runs_prompts_and_checkpoints_its_data_position(runs):
    results, tmp_path = runs
    for step in range(1, STEPS + 1):
        assert list(results["one_step_off"][1][step]["index"]) == list(results["sync"][1][step]["index"]), step
    # The checkpoint of step 2 resumes on step 3's prompts, not past the batch prefetched for step 3.
    saved = {schedule: read_trainer_state(tmp_path / schedule / "checkpoints" / "global_step_2")["loader"]
             for schedule in ("sync", "one_step_off")}
    assert saved["one_step_off"] == saved["sync"]


@pytest.mark.parametrize("overrides, message", [
    (["trainer.schedule=fully_async"], "trainer.schedule='fully_async' is not one of ['sync', 'one_step_off', 'async']"),
    (["trainer.schedule=one_step_off", "algorithm.adv_estimator=remax"],
     "algorithm.adv_estimator='remax' with trainer.schedule=one_step_off — ReMax's greedy baseline"),
    (["trainer.schedule=async", "trainer.max_staleness=0"], "trainer.max_staleness=0 is out of range — expected ≥ 1"),
    (["trainer.schedule=one_step_off", "algorithm.filter_groups.enable=true"],
     "algorithm.filter_groups.enable=True with trainer.schedule=one_step_off — DAPO's dynamic sampling"),
])
def test_what_cannot_run_one_step_off_is_refused_before_anything_starts(overrides, message):
    with pytest.raises(ConfigError) as info:
        validate_config(load_config("grpo", overrides), (1, "one process"))
    assert message in str(info.value)


@pytest.mark.parametrize("schedule, fixed", [("sync", 0), ("one_step_off", 1)])
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_staleness_bound_the_schedule_would_ignore_is_refused_in_one_line(schedule, fixed, dry_run, capsys):
    code = main(["train", "--recipe", "grpo", *(["--dry-run"] if dry_run else []), f"trainer.schedule={schedule}",
                 "trainer.max_staleness=3"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (
        f"recipezoo: config error: trainer.max_staleness=3 with trainer.schedule={schedule} — only the async "
        f"schedule reads it ({schedule}'s staleness is fixed at {fixed}); set trainer.schedule=async or leave "
        "trainer.max_staleness unset (null)")


def test_async_without_a_bound_keeps_the_default_of_two():
    config = load_config("grpo", ["trainer.schedule=async"])
    assert config.trainer.max_staleness is None
    validate_config(config, (1, "one process"))
    schedule = AsyncSchedule(SimpleNamespace(config=config, tokenizer=None))
    assert schedule.max_staleness == DEFAULT_MAX_STALENESS == 2
    schedule.close()


def test_a_rollout_worker_killed_mid_generation_stops_the_run_and_its_checkpoint_resumes(random_model_dir, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -c constraints-cpu.txt ray")
    from core.trainer.ray_controller import WorkerDiedError

    class KillRank1WhileGenerating(GRPOTrainer):
        def generate(self, prompts, params=None):
            if self.global_step == 2:  # the rollout for step 3, generating in the background during step 2
                ray.kill(self.actor_rollout.workers[1])
            return super().generate(prompts, params)

    common = [f"model.path={random_model_dir}", "trainer.test_freq=0", "data.train_batch_size=4",
              "actor.ppo_mini_batch_size=2", "rollout.n=2", "data.max_response_length=6",
              "tracking.backends=[console]", "trainer.total_steps=3", "trainer.save_freq=1",
              f"trainer.output_dir={tmp_path}/out"]
    ray.shutdown()
    # address="local": a cluster of its own, not one already running on the host (ray.init would join that)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        trainer = KillRank1WhileGenerating(load_config("grpo", common + [
            "trainer.schedule=one_step_off", "trainer.controller=ray", "trainer.n_gpus_per_node=2",
            "trainer.num_threads=1"]))
        with pytest.raises(WorkerDiedError, match=r"actor_rollout.*(worker rank \d of 2 died|shut down after a worker "
                                                  r"died).*trainer.resume=auto"):
            trainer.fit()
    finally:
        ray.shutdown()
    root = tmp_path / "out" / "checkpoints"
    assert latest_checkpoint(root) == root / "global_step_1"
    resumed = GRPOTrainer(load_config("grpo", common + ["trainer.resume=auto"]))  # locally, one process
    resumed.fit()
    assert resumed.global_step == 3 and (root / "global_step_3").is_dir()


def test_staleness_metrics_are_a_histogram_over_the_bound():
    # Rows 0, 1, 1, 1 versions old: mean 3/4, max 1, a quarter at 0 and three quarters at 1.
    assert staleness_metrics(np.array([0, 1, 1, 1]), max_staleness=1) == {
        "rollout_corr/staleness/mean": 0.75, "rollout_corr/staleness/max": 1.0,
        "rollout_corr/staleness/frac_0": 0.25, "rollout_corr/staleness/frac_1": 0.75}


def test_a_rollout_older_than_the_bound_never_reaches_training(random_model_dir, tmp_path):
    trainer = GRPOTrainer(load_config("grpo", [
        f"model.path={random_model_dir}", "data.train_batch_size=4", "actor.ppo_mini_batch_size=2", "rollout.n=2",
        "data.max_response_length=6", "tracking.backends=[console]", "trainer.schedule=one_step_off",
        f"trainer.output_dir={tmp_path}"]))
    trainer.schedule.next_rollout()  # step 1's batch, generated on the spot; step 2's prefetched on version 0
    trainer.sync_weights()
    trainer.sync_weights()  # a second sync before step 2 trains: its batch is now 2 versions old
    with pytest.raises(RuntimeError, match="a rollout 2 weight versions old reached training, over its bound of 1"):
        trainer.schedule.next_rollout()
    trainer.schedule.close()


LEARN_STEPS, MIN_GAIN = 20, 0.04


@pytest.mark.slow
def test_one_step_off_raises_held_out_accuracy_on_the_tiny_task(tmp_path):
    """On the warm-started tiny model, 20 one-step-off GRPO steps gain at least `MIN_GAIN` of held-out
    accuracy (0.656 -> 0.711 with this seed; at 10 steps the gain ranged from +0.008 to +0.086 between
    machines whose CPU kernels warm-start the model slightly differently). `python -m bench.async_rl.tiny` puts
    both schedules' gains side by side over three seeds (results/async/tiny_cpu.md)."""
    threads = torch.get_num_threads()  # trainer.num_threads=1 sets it for the whole process, as the bench runs
    try:
        trainer = GRPOTrainer(load_config("grpo", [
            "trainer.schedule=one_step_off", f"trainer.total_steps={LEARN_STEPS}", f"trainer.test_freq={LEARN_STEPS}",
            "data.val_max_samples=128", "trainer.save_freq=0", "trainer.num_threads=1",
            "tracking.backends=[console]", f"trainer.output_dir={tmp_path}/out"]))
        trainer.fit()
    finally:
        torch.set_num_threads(threads)
    (_, before), (_, after) = trainer.val_history[0], trainer.val_history[-1]
    before, after = before["val/arithmetic/acc"], after["val/arithmetic/acc"]
    assert after - before >= MIN_GAIN, f"held-out accuracy {before:.3f} -> {after:.3f}"
