"""`trainer.schedule=async` with `trainer.stream_groups=k` for real (local controller, HF rollout): batches
generated k prompts' groups per engine call stay within `trainer.max_staleness`, the finished groups waiting
never exceed max_staleness batches, a step trains on whole groups of one batch of prompts, a weight sync
lands between the parts of a batch, and a resumed run draws the uninterrupted run's prompts."""

import threading
import time

import pytest

from core.config import ConfigError, load_config
from core.trainer.checkpoint import read_trainer_state
from core.trainer.config_checks import validate_config
from recipes.grpo.trainer import GRPOTrainer

BATCH, N, MAX_STALENESS = 4, 2, 2
CAPACITY = MAX_STALENESS * BATCH  # groups: the prompts drawn ahead of training


def streaming_trainer(model_dir, out, *overrides):
    return GRPOTrainer(load_config("grpo", [
        f"model.path={model_dir}", "trainer.test_freq=0", f"data.train_batch_size={BATCH}",
        "actor.ppo_mini_batch_size=2", f"rollout.n={N}", "data.max_response_length=6",
        "tracking.backends=[console]", "trainer.schedule=async", f"trainer.max_staleness={MAX_STALENESS}",
        "trainer.stream_groups=3", "trainer.total_steps=4", f"trainer.output_dir={out}", *overrides]))


def record(trainer, wait_for_generation=False):
    """Fit; per step: the logged metrics and the batch the policy update received. `wait_for_generation`:
    every update first waits until all prompts drawn so far are generated (the slowest possible trainer)."""
    logged, updated = {}, {}
    log, update = trainer.tracking.log_metrics, trainer.update_policy

    def record_update(batch):
        updated[trainer.global_step] = batch
        if wait_for_generation:
            for parts, _ in trainer.schedule.pending:
                for part in parts:
                    part.result()
        return update(batch)

    def record_log(metrics, step):
        logged.setdefault(step, {}).update(metrics)
        log(metrics, step=step)

    trainer.tracking.log_metrics, trainer.update_policy = record_log, record_update
    trainer.fit()
    return logged, updated


@pytest.fixture(scope="module")
def run_ahead(random_model_dir, tmp_path_factory):
    """4 steps, parts of 3 groups (batches of 4: parts of 3 and 1), generation as far ahead as allowed."""
    out = tmp_path_factory.mktemp("stream")
    trainer = streaming_trainer(random_model_dir, out / "run", "trainer.save_freq=2")
    start = trainer.train_loader.state_dict()
    logged, updated = record(trainer, wait_for_generation=True)
    trainer.train_loader.load_state_dict(start)  # the prompts an uninterrupted loader serves, in order
    drawn = [list(next(trainer.train_loader)["index"]) for _ in range(4)]
    return logged, updated, drawn, out


def test_streamed_groups_never_exceed_the_bound_nor_the_buffer_its_capacity(run_ahead):
    logged, updated, _, _ = run_ahead
    staleness = [logged[step]["rollout_corr/staleness/max"] for step in range(1, 5)]
    fill = [logged[step]["rollout_corr/stream_buffer_groups"] for step in range(2, 5)]
    # Step 1 generates on the spot. Every update waits for all prompts drawn so far, so steps 2 and 3 find
    # their batch and the next one finished: the buffer is full. Steps 3 and 4 train on version 2 and 3 on
    # batches generated during steps 1 and 2 (versions 0 and 1): at the bound.
    assert staleness == [0, 1, 2, 2]
    assert fill == [CAPACITY, CAPACITY, BATCH]  # the last step draws nothing further
    for step, batch in updated.items():
        assert min(batch["policy_version"]) >= step - 1 - MAX_STALENESS, step  # step k trains on version k-1


def test_a_step_trains_on_whole_contiguous_groups_of_one_batch_of_prompts(run_ahead):
    _, updated, drawn, _ = run_ahead
    for step, batch in updated.items():
        uids, versions = list(batch["uid"]), list(batch["policy_version"])
        groups = [uids[row: row + N] for row in range(0, len(uids), N)]
        assert all(len(set(group)) == 1 for group in groups), step  # a group's rows are adjacent
        assert len({group[0] for group in groups}) == BATCH, step  # and no uid is in two groups
        assert all(len(set(versions[row: row + N])) == 1 for row in range(0, len(uids), N)), step
        assert list(batch["index"][::N]) == drawn[step - 1], step  # the loader's own order


def test_a_resumed_run_trains_on_the_prompts_the_uninterrupted_run_did(run_ahead, random_model_dir):
    _, updated, _, out = run_ahead
    checkpoint = out / "run" / "checkpoints" / "global_step_2"
    # Step 3's batch was generated and waiting when step 2 saved: the position before it is saved.
    assert read_trainer_state(checkpoint)["loader"]["offset"] == 2 * BATCH
    resumed = streaming_trainer(random_model_dir, out / "resumed", f"trainer.resume={checkpoint}")
    _, resumed_updated = record(resumed)
    assert sorted(resumed_updated) == [3, 4]
    for step in (3, 4):
        assert list(resumed_updated[step]["index"]) == list(updated[step]["index"]), step


@pytest.mark.parametrize("partial", [False, True])
def test_a_weight_sync_lands_between_the_parts_of_a_batch(random_model_dir, tmp_path, partial):
    trainer = streaming_trainer(random_model_dir, tmp_path, "trainer.stream_groups=1", "trainer.max_staleness=1",
                                "trainer.total_steps=2", f"trainer.partial_rollout={partial}",
                                "trainer.partial_rollout_chunk=3")
    generate = trainer.actor_rollout.generate

    def slow_generate(prompts, params):  # a batch's 4 parts outlast step 1's training (~0.1 s) by far
        if threading.current_thread().name.startswith("rollout"):
            time.sleep(0.35)
        return generate(prompts, params)

    trainer.actor_rollout.generate = slow_generate
    logged, updated = record(trainer)
    versions = list(updated[2]["policy_version"])
    # Step 2's parts began on version 0 until step 1's sync got in, then on version 1; a group is one part.
    assert versions[0] == 0 and versions[-1] == 1, versions
    assert all(versions[row] == versions[row + 1] for row in range(0, len(versions), N))
    assert logged[2]["rollout_corr/staleness/max"] == 1
    if partial:
        assert logged[2]["rollout_corr/partial_segments"] >= 1


def test_an_error_in_the_rollout_thread_stops_the_run_and_the_thread(random_model_dir, tmp_path):
    trainer = streaming_trainer(random_model_dir, tmp_path)
    generate, calls = trainer.actor_rollout.generate, []

    def failing_generate(prompts, params):
        calls.append(threading.current_thread().name)
        if len(calls) == 3:  # the second part of step 2's batch, in the rollout thread
            raise RuntimeError("rollout engine out of memory")
        return generate(prompts, params)

    trainer.actor_rollout.generate = failing_generate
    with pytest.raises(RuntimeError, match="rollout engine out of memory"):
        trainer.fit()
    assert calls[2].startswith("rollout") and trainer.global_step == 2
    assert calls[2] not in {thread.name for thread in threading.enumerate()}  # closed: the thread has ended


@pytest.mark.parametrize("overrides, message", [
    (["trainer.stream_groups=0"], "trainer.stream_groups=0 is out of range — expected ≥ 1"),
    (["trainer.stream_groups=two"], "trainer.stream_groups='two' is a string — expected an integer or null"),
    (["trainer.stream_groups=8"], "trainer.stream_groups=8 is more than data.train_batch_size=4 — expected at most"),
    (["trainer.schedule=one_step_off"], "trainer.stream_groups=2 with trainer.schedule=one_step_off — streaming"),
])
def test_a_bad_stream_groups_is_one_line_naming_the_key(overrides, message):
    config = load_config("grpo", ["trainer.schedule=async", "trainer.stream_groups=2", "data.train_batch_size=4",
                                  "actor.ppo_mini_batch_size=2", *overrides])
    with pytest.raises(ConfigError) as info:
        validate_config(config, (1, "one process"))
    assert message in str(info.value) and "\n" not in str(info.value)
