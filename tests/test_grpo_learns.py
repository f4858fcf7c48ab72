"""GRPO on the warm-started tiny model raises held-out accuracy, and MLflow records it.

40 steps: held-out accuracy 0.637 -> 0.789 here (+0.15; +0.12 by step 20, +0.18 at step 30), so the +0.10 asked for
holds with room for another machine's arithmetic; seeds are fixed. About 1.5 minutes on 2 cores.
"""

import mlflow
import pytest

from core.config import load_config
from recipes.grpo.trainer import GRPOTrainer

STEPS = 40
MIN_GAIN = 0.10


@pytest.mark.slow
def test_grpo_raises_held_out_accuracy_and_mlflow_shows_it(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    config = load_config("grpo", [
        f"trainer.total_steps={STEPS}", f"trainer.test_freq={STEPS}", "data.val_max_samples=256",
        f"tracking.uri={uri}", "tracking.run_name=grpo-learns-test", f"trainer.output_dir={tmp_path}/out",
    ])
    trainer = GRPOTrainer(config)
    trainer.fit()

    (_, before), (_, after) = trainer.val_history[0], trainer.val_history[-1]
    gain = after["val/arithmetic/acc"] - before["val/arithmetic/acc"]
    assert gain >= MIN_GAIN, f"held-out accuracy {before['val/arithmetic/acc']:.3f} -> {after['val/arithmetic/acc']:.3f}"

    client = mlflow.MlflowClient(uri)
    run = client.search_runs(client.get_experiment_by_name("recipezoo").experiment_id)[0]
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "val/arithmetic/acc")}
    assert history[0] == pytest.approx(before["val/arithmetic/acc"])
    assert history[STEPS] == pytest.approx(after["val/arithmetic/acc"])
    assert run.info.status == "FINISHED"
    assert run.data.params["algorithm.adv_estimator"] == "grpo"
    assert len(client.get_metric_history(run.info.run_id, "actor/pg_loss")) == STEPS
