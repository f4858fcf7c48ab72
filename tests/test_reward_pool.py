"""PoolRewardManager: real worker processes; a raising, hanging or dying scorer costs one row, not the run."""

import functools
import multiprocessing
import time

import pytest
from omegaconf import OmegaConf

from core.config import CONFIG_DIR
from core.reward import gsm8k
from core.reward.build import build_reward_manager
from core.reward.custom import CustomFunction
from core.reward.manager import reward_metrics
from core.reward.pool import PoolRewardManager
from tests.test_reward_manager import TOKENIZER, rollout_batch

TIMEOUT_S = 1.0

# The test scorers live in a file loaded by path, as a user's custom function would be: the
# workers load it themselves from (path, name).
SCORERS = '''
import os
import time


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "raise":
        raise ValueError("bad row")
    if solution_str == "hang":
        time.sleep(3600)
    if solution_str == "exit":
        os._exit(7)
    return float(solution_str == ground_truth)


def echo_index(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(extra_info["sleep"])  # finish out of order
    return float(solution_str)
'''


@pytest.fixture(scope="module")
def scorer_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pool") / "scorers.py"
    path.write_text(SCORERS)
    return str(path)


@pytest.fixture(scope="module")
def pool(scorer_file):
    with PoolRewardManager(TOKENIZER, custom_scorer=CustomFunction(scorer_file, "compute_score"),
                           num_workers=2, timeout_s=TIMEOUT_S) as manager:
        yield manager


def score(manager, texts, truths=None):
    truths = truths if truths is not None else ["ok"] * len(texts)
    return manager.score_texts(texts, ["any"] * len(texts), truths)


def test_a_raising_scorer_scores_zero_with_one_error_and_other_rows_score(pool):
    scores, info = pool(rollout_batch(["ok", "raise", "ok", "no"], ["any"] * 4, ["ok"] * 4))
    assert info["score"] == [1.0, 0.0, 1.0, 0.0]
    assert info["error"] == [None, "ValueError: bad row", None, None]
    assert reward_metrics(info) == {"reward/error_count": 1.0, "reward/timeout_count": 0.0}
    assert scores.sum(-1).tolist() == [1.0, 0.0, 1.0, 0.0]


def test_a_hanging_scorer_times_out_and_the_pool_recovers(pool):
    pids = {worker.process.pid for worker in pool._workers}
    start = time.monotonic()
    _, info = pool(rollout_batch(["ok", "hang", "ok"], ["any"] * 3, ["ok"] * 3))
    elapsed = time.monotonic() - start
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 2.0
    assert info["score"] == [1.0, 0.0, 1.0]
    assert info["error"][1].startswith("timeout:")
    assert reward_metrics(info) == {"reward/error_count": 1.0, "reward/timeout_count": 1.0}
    # The hung worker was killed and replaced; the next call uses a full pool.
    assert len(pids & {worker.process.pid for worker in pool._workers}) == 1
    assert all(worker.process.is_alive() for worker in pool._workers)
    assert [r["score"] for r in score(pool, ["ok"] * 4)] == [1.0] * 4


def test_two_hanging_rows_on_two_workers_time_out_together(pool):
    start = time.monotonic()
    results = score(pool, ["hang", "hang", "ok"])
    assert time.monotonic() - start < 2 * TIMEOUT_S + 1.0  # in parallel, and the third row still ran
    assert [r["score"] for r in results] == [0.0, 0.0, 1.0]


def test_a_worker_that_dies_costs_one_row_and_is_replaced(pool):
    results = score(pool, ["ok", "exit", "ok"])
    assert [r["score"] for r in results] == [1.0, 0.0, 1.0]
    assert "exit code 7" in results[1]["error"]
    assert all(worker.process.is_alive() for worker in pool._workers)


def test_a_worker_killed_while_idle_is_replaced_on_the_next_call(pool):
    victim = pool._workers[0].process
    victim.kill()
    victim.join()
    assert [r["score"] for r in score(pool, ["ok"] * 4)] == [1.0] * 4
    assert victim not in [worker.process for worker in pool._workers]


def test_order_is_preserved_over_many_rows(scorer_file):
    n = 60
    texts = [str(i) for i in range(n)]
    sleeps = [{"sleep": 0.01 * (i % 3 == 0)} for i in range(n)]
    with PoolRewardManager(TOKENIZER, custom_scorer=CustomFunction(scorer_file, "echo_index"),
                           num_workers=2, timeout_s=5) as manager:
        results = manager.score_texts(texts, ["any"] * n, [""] * n, sleeps)
    assert [r["score"] for r in results] == [float(i) for i in range(n)]


def test_builtin_scorers_run_in_the_pool():
    gsm8k_flexible = functools.partial(gsm8k.compute_score, method="flexible")
    with PoolRewardManager(TOKENIZER, scorers={"gsm8k": gsm8k_flexible}, num_workers=1, timeout_s=5) as manager:
        results = manager.score_texts(["it is 72", r"so \boxed{\frac12}"], ["gsm8k", "aime24"], ["72", "0.5"])
    assert [r["score"] for r in results] == [1.0, 1.0]


def test_close_stops_every_worker(scorer_file):
    manager = PoolRewardManager(TOKENIZER, custom_scorer=CustomFunction(scorer_file, "compute_score"),
                                num_workers=2, timeout_s=TIMEOUT_S)
    processes = [worker.process for worker in manager._workers]
    manager.close()
    manager.close()  # idempotent
    assert not any(process.is_alive() for process in processes)
    assert not set(processes) & set(multiprocessing.active_children())
    with pytest.raises(RuntimeError, match="closed"):
        score(manager, ["ok"])


def test_a_custom_file_the_workers_cannot_load_fails_at_start(tmp_path):
    with pytest.raises(RuntimeError, match="did not start.*reward.custom_function"):
        PoolRewardManager(TOKENIZER, custom_scorer=CustomFunction(str(tmp_path / "gone.py"), "compute_score"),
                          num_workers=1)


def test_an_unpicklable_scorer_is_refused_up_front():
    with pytest.raises(ValueError, match=r"'mine'.*cannot be sent to a worker.*module-level function"):
        PoolRewardManager(TOKENIZER, scorers={"mine": lambda text, truth: 1.0}, num_workers=1)


def test_build_reward_manager_builds_the_pool_from_the_config(scorer_file):
    cfg = OmegaConf.load(CONFIG_DIR / "base.yaml").reward
    cfg.manager, cfg.num_workers, cfg.timeout_s = "pool", 1, TIMEOUT_S
    cfg.custom_function.path = scorer_file
    with build_reward_manager(cfg, TOKENIZER) as manager:
        assert isinstance(manager, PoolRewardManager) and manager.timeout_s == TIMEOUT_S
        _, info = manager(rollout_batch(["ok", "hang"], ["openai/gsm8k", "aime24"], ["ok", "ok"]))
    assert info["score"] == [1.0, 0.0]
    assert reward_metrics(info)["reward/timeout_count"] == 1.0
