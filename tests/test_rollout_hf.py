"""HF rollout: batch layout, EOS masking, decoding, and log-probs that agree with the training engine.

PPO's ratio is exp(log π_train − log π_rollout): if the rollout and the engine disagree on the
same weights, the "on-policy" ratio is not 1 and clipping fires on noise. So the rollout's
log-probs are checked against `FSDPEngine.compute_log_probs` token by token.
"""

import copy

import numpy as np
import pytest
import torch
from transformers import Qwen3ForCausalLM

from core.batch import Batch
from core.config import load_config
from core.data.arithmetic import make_rows
from core.data.dataset import PromptDataset, collate_prompts
from core.data.rows import write_rows
from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.models.tiny import build_tiny_tokenizer, tiny_qwen3_config
from core.rollout.base import SamplingParams, assemble_rollout, response_mask_from_ids
from core.rollout.build import build_rollout
from core.rollout.hf import HFRollout

MAX_NEW_TOKENS = 12
EOS = 2  # hand-made examples only


# ---- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def model_config(tokenizer):
    # initializer_range 0.2 (not 0.02): a 0.02-init model's greedy output is one token repeated,
    # which would make "greedy equals X" comparisons nearly vacuous.
    return tiny_qwen3_config(tokenizer, num_hidden_layers=2, initializer_range=0.2)


@pytest.fixture(scope="module")
def model(model_config):
    torch.manual_seed(0)
    return Qwen3ForCausalLM(model_config).eval()


@pytest.fixture(scope="module")
def dataset(tokenizer, tmp_path_factory):
    path = write_rows(make_rows("test", 8, seed=0), tmp_path_factory.mktemp("data") / "test.parquet")
    return PromptDataset(path, tokenizer, max_prompt_length=64)


@pytest.fixture(scope="module")
def prompts(dataset):
    batch = collate_prompts(list(dataset), dataset.pad_token_id)  # left-padded
    lengths = batch["attention_mask"].sum(1)
    assert lengths.min() < lengths.max(), "no prompt is padded: the padding paths would go untested"
    return batch


@pytest.fixture(scope="module")
def rollout(model, tokenizer):
    return HFRollout(model, tokenizer)


@pytest.fixture(scope="module")
def world():
    return init_distributed("cpu")


def sample(rollout, prompts, **params) -> Batch:
    return rollout.generate(prompts, SamplingParams(**{"max_new_tokens": MAX_NEW_TOKENS, **params}))


@torch.no_grad()
def greedy_loop(model, prompt_ids: list[int], eos_token_id: int, max_new_tokens: int = MAX_NEW_TOKENS) -> list[int]:
    """Argmax of the model's last logit, one token at a time, full recompute, no padding."""
    ids = torch.tensor([prompt_ids])  # (1, T)
    out = []
    for _ in range(max_new_tokens):
        next_id = model(input_ids=ids).logits[0, -1].argmax().item()
        out.append(next_id)
        if next_id == eos_token_id:
            break
        ids = torch.cat([ids, torch.tensor([[next_id]])], dim=1)
    return out


def valid_tokens(batch: Batch, row: int) -> list[int]:
    return batch["responses"][row, : batch["response_mask"][row].sum()].tolist()


# ---- response mask and assembly (hand-made) ------------------------------------------------------
def test_response_mask_is_one_through_the_first_eos_and_zero_after():
    responses = torch.tensor([
        [5, EOS, 0, 0],      # EOS then pad
        [5, 6, 7, 8],        # no EOS: all valid (hit max_new_tokens)
        [EOS, EOS, EOS, 0],  # EOS first: only it counts
        [5, 6, EOS, EOS],    # a later EOS does not extend the response
    ])
    expected = torch.tensor([
        [1, 1, 0, 0],
        [1, 1, 1, 1],
        [1, 0, 0, 0],
        [1, 1, 1, 0],
    ])
    assert torch.equal(response_mask_from_ids(responses, EOS), expected)


def test_the_response_mask_ends_at_the_first_of_several_stop_tokens():
    responses = torch.tensor([[5, 9, 6, 0], [5, 6, EOS, 9], [5, 6, 7, 8]])
    assert response_mask_from_ids(responses, {EOS, 9}).tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


def test_a_response_stops_on_the_models_own_stop_ids_too(model, tokenizer, prompts):
    """A model whose turns end on another token than the tokenizer's EOS (Qwen3's generation_config lists two
    ids) must stop there, as vLLM and SGLang do: here, the second token greedy decoding picks for row 0."""
    plain = sample(HFRollout(model, tokenizer), prompts, n=1)
    row = plain["responses"][0].tolist()
    assert plain["response_mask"][0].sum() >= 3 and row[1] not in (row[0], tokenizer.eos_token_id)
    stopping = sample(HFRollout(model, tokenizer, stop_ids={tokenizer.eos_token_id, row[1]}), prompts, n=1)
    assert stopping["responses"][0, :2].tolist() == row[:2]
    assert stopping["response_mask"][0].tolist()[:3] == [1, 1, 0]
    assert (stopping["response_mask"].sum(1) <= plain["response_mask"].sum(1)).all()


def test_the_trainer_s_hf_rollout_stops_where_the_model_says(model, tokenizer, tmp_path):
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [7, 9]}')
    config = load_config("grpo", ["rollout.name=hf"])
    rollout = build_rollout(config, str(tmp_path), tokenizer, lambda: model)
    assert rollout.stop_ids == sorted({tokenizer.eos_token_id, 7, 9})


def test_assemble_rollout_joins_prompts_and_responses_and_masks_log_probs():
    prompts = Batch(
        {"input_ids": torch.tensor([[0, 7, 8], [9, 9, 9]]),  # row 0 left-padded with one pad
         "attention_mask": torch.tensor([[0, 1, 1], [1, 1, 1]])},
        {"uid": ["a", "b"]},
    )
    responses = torch.tensor([[4, EOS, 0], [5, 6, 7], [EOS, 0, 0], [5, EOS, 0]])  # n=2, interleaved
    log_probs = torch.full((4, 3), -1.0)
    out = assemble_rollout(prompts, responses, log_probs, response_mask_from_ids(responses, EOS), n=2)

    assert list(out["uid"]) == ["a", "a", "b", "b"]
    assert torch.equal(out["prompts"], torch.tensor([[0, 7, 8], [0, 7, 8], [9, 9, 9], [9, 9, 9]]))
    assert torch.equal(out["input_ids"][0], torch.tensor([0, 7, 8, 4, EOS, 0]))
    assert torch.equal(out["response_mask"], torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]]))
    assert torch.equal(out["attention_mask"][0], torch.tensor([0, 1, 1, 1, 1, 0]))
    # Positions count attended tokens only: the left pad does not shift the first real token off 0.
    assert out["position_ids"][0, 1:5].tolist() == [0, 1, 2, 3]
    assert out["position_ids"][2].tolist() == [0, 1, 2, 3, 3, 3]
    assert torch.equal(out["rollout_log_probs"], -out["response_mask"].float())


# ---- batch layout --------------------------------------------------------------------------------
def test_generate_repeats_each_prompt_n_times_adjacently(rollout, prompts):
    out = sample(rollout, prompts, n=3, seed=0)
    b, t_prompt = prompts["input_ids"].shape
    t_resp = out["responses"].shape[1]
    assert len(out) == 3 * b and 0 < t_resp <= MAX_NEW_TOKENS
    assert list(out["index"]) == list(np.repeat(prompts["index"], 3))
    assert list(out["ground_truth"]) == list(np.repeat(prompts["ground_truth"], 3))
    assert torch.equal(out["prompts"], prompts["input_ids"].repeat_interleave(3, dim=0))
    assert torch.equal(out["input_ids"], torch.cat([out["prompts"], out["responses"]], dim=1))
    for key in ("response_mask", "rollout_log_probs"):
        assert out[key].shape == (3 * b, t_resp)
    for key in ("attention_mask", "position_ids"):
        assert out[key].shape == (3 * b, t_prompt + t_resp)


def test_generated_rows_end_at_the_first_eos(rollout, prompts, tokenizer):
    # A hot temperature and long responses, so that some rows sample EOS well before the end.
    out = sample(rollout, prompts, n=4, seed=0, temperature=2.0, max_new_tokens=24)
    mask = out["response_mask"]
    assert (mask == 0).any(), "no row stopped early: pick a seed where one does"
    assert torch.equal(mask, response_mask_from_ids(out["responses"], tokenizer.eos_token_id))
    assert (out["responses"][mask == 0] == tokenizer.pad_token_id).all()  # finished rows are padded
    assert (out["rollout_log_probs"][mask == 0] == 0).all()
    assert (out["rollout_log_probs"][mask == 1] < 0).all()


# ---- decoding ------------------------------------------------------------------------------------
def test_greedy_equals_a_hand_written_argmax_loop(rollout, model, dataset, tokenizer):
    item = dataset[0]
    out = sample(rollout, collate_prompts([item], dataset.pad_token_id), temperature=0)
    assert valid_tokens(out, 0) == greedy_loop(model, item.prompt_ids, tokenizer.eos_token_id)


def test_greedy_on_a_left_padded_batch_equals_each_prompt_alone(rollout, model, dataset, prompts, tokenizer):
    out = sample(rollout, prompts, temperature=0)
    for row, item in enumerate(dataset):
        expected = greedy_loop(model, item.prompt_ids, tokenizer.eos_token_id)
        assert valid_tokens(out, row) == expected, f"prompt {row} ({len(item.prompt_ids)} tokens)"


def test_micro_batched_generation_equals_one_call(model, tokenizer, prompts):
    whole = sample(HFRollout(model, tokenizer), prompts, n=2, temperature=0)
    chunked = sample(HFRollout(model, tokenizer, micro_batch_size=3), prompts, n=2, temperature=0)
    assert torch.equal(whole["responses"], chunked["responses"])


def test_same_seed_gives_the_same_samples_and_another_seed_others(rollout, prompts):
    first = sample(rollout, prompts, n=2, seed=1)
    again = sample(rollout, prompts, n=2, seed=1)
    other = sample(rollout, prompts, n=2, seed=2)
    assert torch.equal(first["responses"], again["responses"])
    torch.testing.assert_close(first["rollout_log_probs"], again["rollout_log_probs"], rtol=0, atol=0)
    assert not torch.equal(first["responses"], other["responses"])


def test_generate_leaves_the_global_rng_as_it_was(rollout, prompts):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    sample(rollout, prompts, seed=5)
    assert torch.equal(torch.rand(3), expected)


# ---- agreement with the training engine ----------------------------------------------------------
def assert_log_probs_agree(rollout_batch: Batch, engine_log_probs: torch.Tensor) -> None:
    mask = rollout_batch["response_mask"].bool()
    diff = (engine_log_probs - rollout_batch["rollout_log_probs"])[mask].abs().max().item()
    assert diff < 1e-4, f"rollout and engine log-probs differ by {diff:.2e} on valid tokens"
    assert (engine_log_probs[~mask] == 0).all()


def test_rollout_log_probs_equal_engine_log_probs_on_the_same_weights(model, tokenizer, prompts, world):
    # Rollout in micro-batches of 5 and the engine in micro-batches of 4: neither split matters.
    out = sample(HFRollout(model, tokenizer, micro_batch_size=5), prompts, n=2, seed=3,
                 temperature=1.0, top_k=0, top_p=1.0)
    engine = FSDPEngine(copy.deepcopy(model), world, micro_batch_size=4, mixed_precision="fp32")
    assert_log_probs_agree(out, engine.compute_log_probs(out))


def test_temperature_scaled_log_probs_match_the_engine_at_that_temperature(model, rollout, prompts, world):
    out = sample(rollout, prompts, n=2, seed=4, temperature=0.7)
    engine = FSDPEngine(copy.deepcopy(model), world, micro_batch_size=16, mixed_precision="fp32")
    assert_log_probs_agree(out, engine.compute_log_probs(out, temperature=0.7))
    # Not vacuous: at temperature 1 the same tokens have clearly different log-probs.
    mask = out["response_mask"].bool()
    unscaled = engine.compute_log_probs(out, temperature=1.0)
    assert (unscaled - out["rollout_log_probs"])[mask].abs().max() > 1e-2


def test_load_weights_syncs_the_engine_update_into_the_rollout(model, model_config, tokenizer, dataset, prompts, world):
    engine = FSDPEngine(copy.deepcopy(model), world, optim=OptimConfig(lr=1e-2), micro_batch_size=8,
                        mixed_precision="fp32")
    rollout = HFRollout(copy.deepcopy(model), tokenizer)
    before = sample(rollout, prompts, temperature=0)

    # One optimizer step raising the likelihood of sampled responses.
    samples = sample(rollout, prompts, n=2, seed=0)
    def loss_fn(log_probs, entropy, micro, num_tokens, num_seqs):
        return -(log_probs * micro["response_mask"]).sum() / num_tokens, {}
    engine.update(samples, loss_fn, mini_batch_size=len(samples))

    state = engine.full_state_dict()
    rollout.load_weights(state)
    after = sample(rollout, prompts, temperature=0)
    assert not torch.equal(after["responses"], before["responses"]), "the update did not change greedy output"

    updated = Qwen3ForCausalLM(model_config).eval()
    updated.load_state_dict(state)
    for row, item in enumerate(dataset):
        assert valid_tokens(after, row) == greedy_loop(updated, item.prompt_ids, tokenizer.eos_token_id)
    # And the synced rollout's log-probs agree with the engine that made the update.
    resampled = sample(rollout, prompts, n=2, seed=1)
    assert_log_probs_agree(resampled, engine.compute_log_probs(resampled))


def test_load_weights_takes_a_stream_of_parameters_where_a_tied_weight_comes_once(model, tokenizer):
    # The engine's weight stream (`iter_full_weights`) yields parameters, so the tied lm_head comes only as the
    # input embedding; a parameter missing for real is an error naming it.
    target = HFRollout(copy.deepcopy(model), tokenizer)
    streamed = [(name, param.detach() + 1) for name, param in model.named_parameters()]
    assert "lm_head.weight" not in dict(streamed) and model.config.tie_word_embeddings
    target.load_weights(iter(streamed))
    for name, tensor in target.model.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name] + 1), name
    with pytest.raises(RuntimeError, match=r"missing \['model.norm.weight'\], unexpected \[\]"):
        target.load_weights((name, t) for name, t in streamed if name != "model.norm.weight")
