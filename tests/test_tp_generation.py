"""A tp group's generation split over its ranks (core/trainer/tp_generation.py), and its validation
(core/trainer/validation.py). The trainer-level check, a GRPO step at actor.tensor_parallel_size=2 against one process
generating the same halves, is in test_tensor_parallel.py."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.batch import Batch
from core.rollout.base import SamplingParams, split_greedy_baselines
from core.trainer.tp_generation import TensorParallelGeneration, prompt_shares, share_params
from core.trainer.validation import call_rows
from tests.helpers_dist import run_script

SCRIPT = Path(__file__).parent / "dist" / "tp_generation_check.py"


def test_shares_are_contiguous_in_order_and_differ_by_at_most_one_row():
    batch = Batch({"x": torch.arange(5)}, {})
    assert [rows.tolist() for rows in prompt_shares(batch, 2)] == [[0, 1, 2], [3, 4]]
    assert [rows.tolist() for rows in prompt_shares(batch, 4)] == [[0, 1], [2], [3], [4]]


def test_each_rank_samples_its_share_with_a_seed_of_its_own():
    params = SamplingParams(n=4, seed=10)
    assert [share_params(params, 2, rank).seed for rank in (0, 1)] == [20, 21]  # 10 · 2 + rank
    assert share_params(params, 2, 1).n == 4
    unseeded = SamplingParams(seed=None)
    assert share_params(unseeded, 2, 1) is unseeded


def test_split_only_under_tensor_parallelism_and_the_sync_schedule():
    tp2 = SimpleNamespace(mesh={"tp": SimpleNamespace(size=lambda: 2)})
    assert TensorParallelGeneration.applies(tp2, "sync")
    # off-policy schedules generate on a rollout thread: no collective there, every rank generates the whole batch
    assert not TensorParallelGeneration.applies(tp2, "one_step_off")
    assert not TensorParallelGeneration.applies(tp2, "async")
    assert not TensorParallelGeneration.applies(SimpleNamespace(mesh=None), "sync")
    assert not TensorParallelGeneration.applies(SimpleNamespace(mesh={"tp": SimpleNamespace(size=lambda: 1)}), "sync")


def test_validation_calls_are_as_many_on_every_rank():
    # 257 prompts over 2 ranks: 129 and 128; the first needs 2 calls of at most 128, so the second splits its last
    assert [len(rows) for rows in call_rows(129, 257, 2, 128)] == [128, 1]
    assert [len(rows) for rows in call_rows(128, 257, 2, 128)] == [64, 64]
    # otherwise consecutive calls of 128, as one rank makes them: 700 prompts over 2 ranks
    assert [len(rows) for rows in call_rows(350, 700, 2, 128)] == [128, 128, 94]
    assert [rows.tolist() for rows in call_rows(3, 3, 1, 2)] == [[0, 1], [2]]
    assert call_rows(0, 1, 2, 128) == []  # fewer prompts than ranks: nothing to generate


def test_two_ranks_generate_half_each_and_both_end_with_the_one_process_batch(tmp_path):
    result = run_script(SCRIPT, 2, tmp_path / "out.pt")
    # 5 prompts: rank 0 generates prompts 0-2 with seed 7 · 2 + 0, rank 1 prompts 3-4 with 7 · 2 + 1, once each
    assert result["calls"] == [[([0, 1, 2], 14)], [([3, 4], 15)]]
    expected = result["one_process"]
    for batch in result["batches"]:
        assert batch["non_tensors"] == expected["non_tensors"]
        assert batch["tensors"].keys() == expected["tensors"].keys()
        for key, value in expected["tensors"].items():
            torch.testing.assert_close(batch["tensors"][key], value, rtol=0, atol=0, msg=key)
    # ReMax's split: the samples in prompt order, 2 a prompt, then the greedy completions in prompt order
    first = result["batches"][0]
    samples, greedy = split_greedy_baselines(Batch(first["tensors"], {k: np.asarray(v, dtype=object) for k, v in
                                                                      first["non_tensors"].items()}))
    assert samples["index"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert greedy["index"].tolist() == [0, 1, 2, 3, 4]
    # a sample's first token is its prompt's index + 1 and its last the seed its rank sampled with
    assert samples["responses"][:, 0].tolist() == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    # shares of different widths padded back together: the widest response is 3 tokens
    assert samples["responses"].shape[1] == 3


def test_a_tp_group_validates_each_prompt_once(tmp_path):
    result = run_script(SCRIPT, 2, tmp_path / "out.pt")
    rank0, rank1 = result["validation_calls"]
    # every rank takes every 2nd prompt (the tp ranks too), in 2 engine calls each
    assert [len(call) for call in rank0] == [128, 1] and [len(call) for call in rank1] == [64, 64]
    assert sorted(index for call in rank0 + rank1 for index in call) == list(range(257))
    assert {index % 2 for call in rank0 for index in call} == {0}
    # both ranks report the metrics of all 257 prompts: the 129 even indices right
    for metrics in result["validation_metrics"]:
        assert metrics["val/acc"] == pytest.approx(129 / 257)
