"""Partial rollouts (core/rollout/partial.py) with the real HF rollout: a batch generated a few tokens at a
time is the batch generated at once, a weight change between segments takes effect mid-response, and the
async schedule interrupts its generation for a weight sync within its bound."""

import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.batch import Batch
from core.config import ConfigError, load_config
from core.rollout.base import SamplingParams, rollout_from_token_lists, stop_token_ids
from core.rollout.hf import HFRollout
from core.rollout.partial import generate_in_segments
from core.trainer.config_checks import validate_config
from recipes.grpo.trainer import GRPOTrainer

GREEDY = SamplingParams(n=2, temperature=0.0, max_new_tokens=7, seed=0)


@pytest.fixture(scope="module")
def rollout(random_model_dir):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(random_model_dir, dtype=torch.float32)
    return HFRollout(model, AutoTokenizer.from_pretrained(random_model_dir))


def prompt_batch(tokenizer, texts):
    ids = [tokenizer(text)["input_ids"] for text in texts]
    width = max(map(len, ids))
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, row_ids in enumerate(ids):
        input_ids[row, width - len(row_ids):], mask[row, width - len(row_ids):] = torch.tensor(row_ids), 1
    return Batch({"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)},
                 {"uid": np.array(["a", "b", "c"], dtype=object)[: len(ids)]}, {})


def segmented(rollout, prompts, chunk, versions):
    tokenizer = rollout.tokenizer
    return generate_in_segments(rollout.generate, rollout.generate, prompts, GREEDY, chunk, versions,
                                {tokenizer.eos_token_id}, tokenizer.pad_token_id)


def test_a_batch_generated_two_tokens_at_a_time_is_the_batch_generated_at_once(rollout):
    prompts = prompt_batch(rollout.tokenizer, ["1+2=", "13+25=", "7+7="])
    whole = rollout.generate(prompts, GREEDY)
    calls = []
    parts = segmented(rollout, prompts, 2, lambda: calls.append(0) or 0)
    assert len(calls) == 4 == parts.meta["partial_rollout_segments"]  # 7 tokens: 2 + 2 + 2 + 1
    assert torch.equal(parts["responses"], whole["responses"])
    assert torch.equal(parts["response_mask"], whole["response_mask"])
    assert torch.equal(parts["input_ids"], whole["input_ids"])
    torch.testing.assert_close(parts["rollout_log_probs"], whole["rollout_log_probs"], atol=1e-4, rtol=1e-4)
    assert list(parts["uid"]) == ["a", "a", "b", "b", "c", "c"]
    assert list(parts["policy_version_last"]) == [0] * 6


def test_weights_changed_between_segments_generate_the_rest_of_each_response(rollout):
    prompts = prompt_batch(rollout.tokenizer, ["1+2=", "13+25="])
    before = rollout.generate(prompts, GREEDY)
    original = {name: value.clone() for name, value in rollout.model.state_dict().items()}
    perturbed = {name: value + 0.05 * torch.randn_like(value) if value.is_floating_point() else value
                 for name, value in original.items()}
    versions = iter([0, 1, 1, 1])

    def sync_after_first_segment():
        version = next(versions)
        if version == 1:
            rollout.load_weights(perturbed)
        return version

    try:
        parts = segmented(rollout, prompts, 3, sync_after_first_segment)
        expected_rest = rollout.generate(  # the new weights, continuing from the first 3 tokens
            Batch({"input_ids": parts["input_ids"][:, : prompts["input_ids"].shape[1] + 3],
                   "attention_mask": parts["attention_mask"][:, : prompts["input_ids"].shape[1] + 3]}, {}, {}),
            replace(GREEDY, n=1, max_new_tokens=4))
    finally:
        rollout.load_weights(original)
    assert torch.equal(parts["responses"][:, :3], before["responses"][:, :3])  # the old weights' tokens
    assert torch.equal(parts["responses"][:, 3:], expected_rest["responses"])
    torch.testing.assert_close(parts["rollout_log_probs"][:, 3:], expected_rest["rollout_log_probs"],
                               atol=1e-4, rtol=1e-4)
    assert not torch.allclose(parts["rollout_log_probs"][:, 3:], before["rollout_log_probs"][:, 3:])
    assert list(parts["policy_version_last"]) == [1] * 4


def test_a_response_ending_on_the_models_own_stop_token_at_a_segment_end_is_not_continued(rollout):
    """An engine stops on the model's end-of-turn ids too (here 7; the tokenizer's EOS is another id): a row
    that ends on one exactly where its segment ends is finished, a row that filled it with other tokens goes on.
    The engine is scripted: each call returns, for each row, the next tokens of its prompt's script."""
    tokenizer = rollout.tokenizer
    prompts = prompt_batch(tokenizer, ["1+2=", "13+25="])
    scripts = {tuple(tokenizer("1+2=")["input_ids"]): [11, 12, 7],  # ends on 7 with its first segment
               tuple(tokenizer("13+25=")["input_ids"]): [21, 22, 23, 24, 25]}
    rows_per_call = []

    def engine(batch, params):
        responses = []
        for row_ids, mask in zip(batch["input_ids"], batch["attention_mask"]):
            sequence = row_ids[mask.bool()].tolist()
            prompt = next(p for p in scripts if tuple(sequence[: len(p)]) == p)
            done = len(sequence) - len(prompt)
            responses.append(scripts[prompt][done: done + params.max_new_tokens])
        rows_per_call.append(len(responses))
        return rollout_from_token_lists(batch, responses, [[-0.5] * len(r) for r in responses],
                                        tokenizer.pad_token_id, 1)

    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=5, seed=0)
    assert tokenizer.eos_token_id != 7
    parts = generate_in_segments(engine, engine, prompts, params, 3, lambda: 0, {tokenizer.eos_token_id, 7},
                                 tokenizer.pad_token_id)
    assert rows_per_call == [2, 1]  # only the second row was continued
    assert parts["responses"][0, :3].tolist() == [11, 12, 7] and int(parts["response_mask"][0].sum()) == 3
    assert parts["responses"][1].tolist() == [21, 22, 23, 24, 25]


def test_stop_token_ids_are_the_tokenizers_eos_and_the_models_own(rollout, tmp_path):
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [7, 9]}')
    eos = rollout.tokenizer.eos_token_id
    assert stop_token_ids(rollout.tokenizer, str(tmp_path)) == {eos, 7, 9}
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": 9}')
    assert stop_token_ids(rollout.tokenizer, str(tmp_path)) == {eos, 9}
    (tmp_path / "generation_config.json").unlink()
    assert stop_token_ids(rollout.tokenizer, str(tmp_path)) == {eos}


def test_the_async_schedule_resumes_generations_on_new_weights_within_its_bound(fast_overrides):
    overrides = [o for o in fast_overrides if not o.startswith(("trainer.total_steps", "data.max_response_length"))]
    config = load_config("grpo", overrides + [
        "trainer.total_steps=4", "trainer.schedule=async", "trainer.max_staleness=1", "trainer.partial_rollout=true",
        "trainer.partial_rollout_chunk=2", "data.max_response_length=8", "algorithm.rollout_correction.mode=tis"])
    trainer = GRPOTrainer(config)
    logged, generate = {}, trainer.actor_rollout.generate

    def slow_generate(prompts, params):  # each segment outlasts a training step: syncs land mid-generation
        time.sleep(0.3)
        return generate(prompts, params)

    trainer.actor_rollout.generate = slow_generate
    log = trainer.tracking.log_metrics
    trainer.tracking.log_metrics = lambda metrics, step: (logged.setdefault(step, {}).update(metrics),
                                                          log(metrics, step=step))
    trainer.fit()
    assert all(logged[step]["rollout_corr/staleness/max"] <= 1 for step in range(1, 5))
    assert all(logged[step]["rollout_corr/partial_segments"] >= 1 for step in range(1, 5))
    resumed = [logged[step]["rollout_corr/partial_resumed_frac"] for step in range(1, 5)]
    assert max(resumed) > 0  # some responses were finished by newer weights than began them


@pytest.mark.parametrize("schedule", ["sync", "one_step_off"])
def test_partial_rollouts_need_the_async_schedule(fast_overrides, schedule):
    config = load_config("grpo", fast_overrides + [f"trainer.schedule={schedule}", "trainer.partial_rollout=true"])
    with pytest.raises(ConfigError, match=f"trainer.partial_rollout=true with trainer.schedule={schedule}"):
        validate_config(config)
