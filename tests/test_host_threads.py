"""Torch's CPU threads per process (`core.trainer.setup.host_threads`)."""

from core.trainer.setup import host_threads


def test_an_offloaded_optimizer_gets_the_node_s_cores_split_among_its_ranks():
    assert host_threads(0, True, ranks_per_node=2, cpu_count=32) == 16
    assert host_threads(0, True, ranks_per_node=64, cpu_count=32) == 1


def test_otherwise_the_config_or_torch_s_default_decides():
    assert host_threads(4, True, ranks_per_node=2, cpu_count=32) == 4  # trainer.num_threads wins
    assert host_threads(0, False, ranks_per_node=2, cpu_count=32) is None  # no offload: the launcher's choice
    assert host_threads(0, True, ranks_per_node=None, cpu_count=32) is None  # one process, not torchrun: torch's default
