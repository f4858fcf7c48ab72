"""Issue 38's bad input: a GPU split or placement this node cannot hold, or a recipe that cannot run off-policy,
ends `recipezoo train` in one line naming the key (exit 2), before a process group, a Ray cluster, an engine
or the output dir exists. GPUs are faked by patching torch's count: the check only reads it."""

import sys

import pytest
import torch

from core.cli import main as cli_main
from core.config import ConfigError, load_config
from core.trainer.devices import check_devices

DISAGGREGATED = ("trainer.controller=ray", "trainer.placement=disaggregated")


@pytest.fixture
def gpus(monkeypatch):
    """Make torch see `count` GPUs on this node (0: none, as on a CPU build), with no Ray cluster or torchrun."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)

    def see(count: int) -> None:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.version, "cuda", "12.8" if count else None)
    return see


def refusal(*overrides) -> str:
    with pytest.raises(ConfigError) as info:
        check_devices(load_config("grpo", list(overrides)))
    assert len(str(info.value).splitlines()) == 1
    return str(info.value)


def passes(*overrides) -> None:
    check_devices(load_config("grpo", list(overrides)))


def ray_started() -> bool:
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


# ---- the check ------------------------------------------------------------------------------------
def test_more_ray_training_ranks_than_the_nodes_gpus_are_refused(gpus):
    gpus(2)
    passes("trainer.controller=ray", "trainer.n_gpus_per_node=2")
    assert refusal("trainer.controller=ray", "trainer.n_gpus_per_node=4") == (
        "trainer.nnodes × trainer.n_gpus_per_node = 4 training ranks need 4 GPUs, and this node has 2 (RAY_ADDRESS "
        "is unset, so the Ray cluster is this node) — lower them, or set RAY_ADDRESS to a cluster with more GPUs")


def test_disaggregated_rollout_workers_count_beside_the_training_ranks(gpus):
    gpus(2)
    passes(*DISAGGREGATED, "trainer.n_gpus_per_node=1", "trainer.rollout_workers=1")  # 1 + 1 on 2 GPUs
    assert refusal(*DISAGGREGATED, "trainer.n_gpus_per_node=2", "trainer.rollout_workers=1") == (
        "trainer.nnodes × trainer.n_gpus_per_node = 2 training ranks + trainer.rollout_workers=1 need 3 GPUs, and "
        "this node has 2 (RAY_ADDRESS is unset, so the Ray cluster is this node) — lower them, or set RAY_ADDRESS "
        "to a cluster with more GPUs")


def test_a_one_gpu_node_cannot_hold_a_disaggregated_placement(gpus):
    gpus(1)
    assert refusal(*DISAGGREGATED).startswith("trainer.nnodes × trainer.n_gpus_per_node = 1 training ranks + "
                                              "trainer.rollout_workers=1 need 2 GPUs, and this node has 1")


def test_more_torchrun_ranks_than_the_nodes_gpus_are_refused(gpus, monkeypatch):
    gpus(2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    passes()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert refusal() == ("torchrun's --nproc-per-node=4 ranks on this node need a GPU each, and torch sees 2 — "
                         "start torchrun with --nproc-per-node=2 or less")


def test_trainer_device_cuda_without_a_gpu_is_refused(gpus):
    gpus(0)
    passes()  # trainer.device=auto runs on the CPU
    assert refusal("trainer.device=cuda") == ("trainer.device=cuda but torch sees no GPU on this node (a CPU build "
                                              "of torch) — run on a GPU machine, or set trainer.device=auto to run "
                                              "on the CPU")


@pytest.mark.parametrize("why", ["RAY_ADDRESS", "trainer.device=cpu", "no GPU"])
def test_what_this_node_does_not_decide_is_left_to_ray(gpus, monkeypatch, why):
    gpus(0 if why == "no GPU" else 2)  # on CPU slots Ray counts them itself, once connected
    if why == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # the cluster's nodes hold the GPUs
    device = ["trainer.device=cpu"] if why == "trainer.device=cpu" else []
    passes("trainer.controller=ray", "trainer.n_gpus_per_node=8", *device)


# ---- through `recipezoo train` --------------------------------------------------------------------
def train_refused(capsys, tmp_path, fast_overrides, *overrides, recipe="grpo") -> str:
    code = cli_main(["train", "--recipe", recipe, *fast_overrides, *overrides])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists(), "refused before the run claims its output dir"
    assert not ray_started(), "refused before a Ray cluster starts"
    return err


def test_train_refuses_a_gpu_split_the_node_cannot_hold(gpus, fast_overrides, tmp_path, capsys):
    gpus(2)
    err = train_refused(capsys, tmp_path, fast_overrides, *DISAGGREGATED, "trainer.n_gpus_per_node=2")
    assert err.startswith("recipezoo: config error: trainer.nnodes × trainer.n_gpus_per_node = 2 training ranks + "
                          "trainer.rollout_workers=1 need 3 GPUs, and this node has 2 ")


def test_train_refuses_trainer_device_cuda_on_a_cpu_node(gpus, fast_overrides, tmp_path, capsys):
    gpus(0)
    err = train_refused(capsys, tmp_path, fast_overrides, "trainer.device=cuda")
    assert err.startswith("recipezoo: config error: trainer.device=cuda but torch sees no GPU on this node")


@pytest.mark.parametrize("recipe, overrides, message", [
    ("remax", ["trainer.schedule=one_step_off"],
     "algorithm.adv_estimator='remax' with trainer.schedule=one_step_off — ReMax's greedy baseline must come from "
     "the weights being trained; run it with trainer.schedule=sync"),
    ("dapo", ["trainer.schedule=async"],
     "algorithm.filter_groups.enable=True with trainer.schedule=async — DAPO's dynamic sampling draws and scores "
     "more prompts inside the rollout, which then runs beside the training step; run it with trainer.schedule=sync"),
    ("grpo", ["trainer.schedule=async", "trainer.max_staleness=0"],
     "trainer.max_staleness=0 is out of range — expected ≥ 1"),
    ("grpo", ["trainer.schedule=one_step_off", "trainer.max_staleness=2"],
     "trainer.max_staleness=2 with trainer.schedule=one_step_off — only the async schedule reads it "
     "(one_step_off's staleness is fixed at 1); set trainer.schedule=async or leave trainer.max_staleness unset (null)"),
])
def test_train_refuses_what_cannot_run_off_policy(recipe, overrides, message, fast_overrides, tmp_path, capsys):
    err = train_refused(capsys, tmp_path, fast_overrides, *overrides, recipe=recipe)
    assert err == f"recipezoo: config error: {message}"
