"""Torch's CPU threads per process (`core.trainer.setup.host_threads`)."""

from core.trainer.setup import host_threads


def test_an_offloaded_optimizer_under_torchrun_gets_the_node_s_cores_split_among_its_ranks():
    torchrun = {"LOCAL_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}
    assert host_threads(0, True, torchrun, cpu_count=32) == 16
    assert host_threads(0, True, {"LOCAL_WORLD_SIZE": "64"}, cpu_count=32) == 1


def test_otherwise_the_config_or_torch_s_default_decides():
    assert host_threads(4, True, {"LOCAL_WORLD_SIZE": "2"}, cpu_count=32) == 4  # trainer.num_threads wins
    assert host_threads(0, False, {"LOCAL_WORLD_SIZE": "2"}, cpu_count=32) is None  # no offload: torchrun's choice
    assert host_threads(0, True, {}, cpu_count=32) is None  # one process, not torchrun: torch's default
