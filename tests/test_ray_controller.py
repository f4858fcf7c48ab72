"""The Ray controller, for real: a local Ray cluster (and a two-node one) on this machine."""

from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -c constraints-cpu.txt ray")

from ray.cluster_utils import Cluster  # noqa: E402

from core.config import load_config  # noqa: E402
from core.models.loading import load_causal_lm  # noqa: E402
from core.trainer.checkpoint import latest_checkpoint, resolve_resume  # noqa: E402
from core.trainer.ray_controller import WorkerDiedError  # noqa: E402
from recipes.grpo.trainer import GRPOTrainer  # noqa: E402
from recipes.ppo.trainer import PPOTrainer  # noqa: E402
from tests.dist.ppo_step import record_update_metrics  # noqa: E402
from tests.helpers_dist import run_script  # noqa: E402

PPO_STEP = Path(__file__).parent / "dist" / "ppo_step.py"
RAY_WORKERS = ["trainer.controller=ray", "trainer.n_gpus_per_node=2", "trainer.num_threads=1"]


@pytest.fixture
def local_ray():
    ray.shutdown()
    # address="local": a cluster of its own, not one already running on the host (ray.init would join that)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def overrides(fast_overrides, *extra):
    return [o for o in fast_overrides if not o.startswith("trainer.total_steps")] + list(extra)


def test_two_ray_workers_take_the_same_ppo_step_as_two_torchrun_ranks(local_ray, fast_overrides, random_model_dir,
                                                                      tmp_path):
    """PPO with a KL loss exercises every role the group runs: rollout, actor, reference and critic."""
    reward = tmp_path / "varied_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return (sum(map(ord, solution_str)) % 7) / 6  # varies, so the step has a real gradient\n")
    common = overrides(fast_overrides, "trainer.total_steps=1", "trainer.save_freq=1", "actor.weight_decay=0",
                       "critic.weight_decay=0", "actor.use_kl_loss=true", f"reward.custom_function.path={reward}",
                       "trainer.num_threads=1")
    expected_metrics = run_script(PPO_STEP, 2, tmp_path / "torchrun.pt", *common,
                                  f"trainer.output_dir={tmp_path}/torchrun")
    trainer = PPOTrainer(load_config("ppo", common + RAY_WORKERS + [f"trainer.output_dir={tmp_path}/ray"]))
    metrics = record_update_metrics(trainer)
    trainer.fit()

    for stage, prefix in (("update_critic", "critic/"), ("update_policy", "actor/")):
        assert metrics[stage][f"{prefix}grad_norm"] > 0 and metrics[stage].keys() == expected_metrics[stage].keys()
        assert metrics[stage] == pytest.approx(expected_metrics[stage], rel=1e-5, abs=1e-7), stage
    for role in ("actor", "critic"):
        expected = torch.load(tmp_path / f"torchrun/checkpoints/global_step_1/{role}/model.pt", weights_only=True)
        got = torch.load(tmp_path / f"ray/checkpoints/global_step_1/{role}/model.pt", weights_only=True)
        assert expected.keys() == got.keys() and len(expected) > 10
        for name in expected:
            # Adam moves a weight by lr·m/(√v + eps): where a gradient is near eps, float noise between the
            # two launches (its source not found) moves it by a sizeable share of lr (1e-4 here). Seen on one
            # machine: 1 weight of 49152 in one matrix off by 1.6e-6, every other within 1e-6. So: all within
            # a tenth of lr, all but 1 in 10,000 within 1e-6; a wrong step moves nearly every weight by ~lr.
            torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-5, msg=f"{role}: {name}")
            off = ((got[name] - expected[name]).abs() > 1e-6 + 1e-5 * expected[name].abs()).sum().item()
            assert off <= got[name].numel() // 10_000, f"{role}: {name}: {off} weights off by more than 1e-6"
    initial = load_causal_lm(random_model_dir).state_dict()
    actor = torch.load(tmp_path / "ray/checkpoints/global_step_1/actor/model.pt", weights_only=True)
    assert any(not torch.equal(initial[name], actor[name]) for name in actor), "the step changed no actor weight"


def test_a_killed_worker_is_named_and_the_run_resumes_its_critic_too(local_ray, fast_overrides, tmp_path):
    class KillRank1AtStep2(PPOTrainer):
        def generate(self, prompts, params=None):
            if self.global_step == 2:
                ray.kill(self.actor_rollout.workers[1])
            return super().generate(prompts, params)

    critic = {}  # the critic's weights just before and just after the resumed run loads its checkpoint

    class RecordResume(PPOTrainer):
        def resume(self):
            critic["fresh"] = self.critic.engine.full_state_dict()
            step = super().resume()
            critic["resumed"] = self.critic.engine.full_state_dict()
            return step

    config = load_config("ppo", overrides(fast_overrides, "trainer.total_steps=3", "trainer.save_freq=1",
                                          *RAY_WORKERS))
    with pytest.raises(WorkerDiedError, match="actor_rollout worker rank 1 of 2 died"):
        KillRank1AtStep2(config).fit()
    root = tmp_path / "out" / "checkpoints"
    assert latest_checkpoint(root) == root / "global_step_1"
    assert resolve_resume("auto", root) == root / "global_step_1"
    resumed = RecordResume(load_config("ppo", overrides(fast_overrides, "trainer.total_steps=3", "trainer.save_freq=1",
                                                       "trainer.resume=auto", *RAY_WORKERS)))
    saved = torch.load(root / "global_step_1" / "critic" / "model.pt", weights_only=True)  # before pruning
    resumed.fit()  # a fresh group loads the checkpoint on every rank and finishes the run
    assert resumed.global_step == 3 and latest_checkpoint(root) == root / "global_step_3"
    assert any(not torch.equal(critic["fresh"][name], saved[name]) for name in saved), "step 1 trained no critic weight"
    for name in saved:
        assert torch.equal(critic["resumed"][name], saved[name]), f"critic {name} was not restored"


def test_workers_spread_over_a_two_node_cluster(fast_overrides, tmp_path):
    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        trainer = GRPOTrainer(load_config("grpo", overrides(fast_overrides, "trainer.total_steps=2", "trainer.nnodes=2",
                                                             "trainer.n_gpus_per_node=1", "trainer.controller=ray",
                                                             "trainer.num_threads=1")))
        nodes = ray.get([worker.node_id.remote() for worker in trainer.actor_rollout.workers])
        assert len(set(nodes)) == 2, "one worker per node"
        trainer.fit()
        assert trainer.global_step == 2
    finally:
        ray.shutdown()
        cluster.shutdown()


RAY_LEARN_STEPS = 20  # 0.637 -> 0.777 here (+0.14; +0.18 at 40 steps)
RAY_MIN_GAIN = 0.08


@pytest.mark.slow
def test_grpo_under_ray_with_two_workers_raises_held_out_accuracy(local_ray, tmp_path):
    config = load_config("grpo", RAY_WORKERS + [
        f"trainer.total_steps={RAY_LEARN_STEPS}", f"trainer.test_freq={RAY_LEARN_STEPS}", "data.val_max_samples=256",
        "trainer.save_freq=0", "tracking.backends=[console]", f"trainer.output_dir={tmp_path}/out",
    ])
    trainer = GRPOTrainer(config)
    trainer.fit()
    (_, before), (_, after) = trainer.val_history[0], trainer.val_history[-1]
    before, after = before["val/arithmetic/acc"], after["val/arithmetic/acc"]
    assert after - before >= RAY_MIN_GAIN, f"held-out accuracy {before:.3f} -> {after:.3f}"


@pytest.fixture
def tiny_reward_model_dir(random_model_dir, tmp_path):
    """A reward model of the tiny architecture with a random scalar head (its scores differ by response)."""
    from core.models.reward_model import load_reward_model
    from core.models.tiny import build_tiny_tokenizer

    torch.manual_seed(0)
    model = load_reward_model(random_model_dir, fresh_head=True)
    torch.nn.init.normal_(model.score.weight)
    model.save_pretrained(tmp_path / "rm")
    build_tiny_tokenizer().save_pretrained(tmp_path / "rm")
    return str(tmp_path / "rm")


@pytest.mark.parametrize("placement, workers", [("colocated", "2"), ("separate", "1")])
def test_the_reward_model_scores_under_ray(local_ray, fast_overrides, tiny_reward_model_dir, tmp_path, placement,
                                           workers):
    """Colocated: each worker scores its rows with its shard; separate: an actor of its own scores the batch."""
    import mlflow

    uri = f"sqlite:///{tmp_path}/ray_rm.db"
    extra = [o for o in fast_overrides if not o.startswith("tracking.backends")]
    config = load_config("grpo", extra + [
        "trainer.controller=ray", f"trainer.n_gpus_per_node={workers}", "trainer.num_threads=1",
        f"reward.model.path={tiny_reward_model_dir}", "reward.weights.model=2.0", f"reward.model.placement={placement}",
        "tracking.backends=[mlflow]", f"tracking.uri={uri}"])
    GRPOTrainer(config).fit()
    client = mlflow.MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("recipezoo").experiment_id])
    metrics = run.data.metrics
    assert metrics["reward/model/mean"] != 0.0 and metrics["reward/model/max"] > metrics["reward/model/min"]
    assert metrics["critic/score/mean"] == pytest.approx(metrics["reward/rule/mean"] + 2.0 * metrics["reward/model/mean"],
                                                         abs=1e-5)
