"""The LLM judge under `trainer.controller=ray`, on a real local Ray cluster and the random tiny policy: each Ray
worker grades its share of the step's responses with a judge engine beside its actor, and the scores and parse
failures reach the step's metrics.

The judge's engine is faked by planted texts (no judge model that writes "Score: N" can be trained here): Ray's
`worker_process_setup_hook` makes every worker's judge engine a `PlantedJudge` (tests/planted_judge.py), the fake
the local judge tests use, answering "Score: 8" and "no idea" in turn. The driver runs no hook: a judge built
there would be the real HF engine of the random model, which writes no score, and every response would be a parse
failure."""

import mlflow
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -c constraints-cpu.txt ray")

import tests.planted_judge as planted_judge  # noqa: E402
from core.cli import main as cli_main  # noqa: E402


@pytest.fixture
def local_ray_with_planted_judge():
    """tests/test_ray_controller.py's `local_ray`, with the hook that plants the judge's texts."""
    ray.shutdown()
    # The workers cannot import tests/: the hook and the fake travel by value.
    ray.cloudpickle.register_pickle_by_value(planted_judge)
    # address="local": a cluster of its own, not one already running on the host (ray.init would join that)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": planted_judge.plant_judge_texts})
    yield
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(planted_judge)


def test_two_ray_workers_grade_with_the_judge_and_its_failures_reach_the_metrics(local_ray_with_planted_judge,
                                                                                 fast_overrides, tmp_path):
    uri = f"sqlite:///{tmp_path}/ray_judge.db"
    overrides = [o for o in fast_overrides if not o.startswith(("tracking.backends", "trainer.total_steps"))]
    assert cli_main(["train", "--recipe", "grpo", *overrides, "trainer.total_steps=2", "trainer.controller=ray",
                     "trainer.n_gpus_per_node=2", "trainer.num_threads=1", "reward.judge.enable=true",
                     "reward.weights.judge=1.0", "reward.judge.batch_size=2", f"tracking.uri={uri}"]) == 0
    client = mlflow.MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("recipezoo").experiment_id])
    metrics = {key: [m.value for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
               for key in run.data.metrics}
    # 8 responses a step, 4 a worker, each worker's judge answering 8/10, unparseable, 8/10, unparseable.
    assert metrics["reward/judge/parse_failures"] == [4.0, 4.0]
    assert metrics["reward/judge/parse_failure_frac"] == [0.5, 0.5]
    assert metrics["reward/judge/mean"] == pytest.approx([0.4, 0.4])
    for step in range(2):  # the judge's scores are in the step's reward: rule + 1.0 · judge
        mixed = metrics["reward/rule/mean"][step] + metrics["reward/judge/mean"][step]
        assert metrics["critic/score/mean"][step] == pytest.approx(mixed, abs=1e-5)
