"""The rollout interface every backend (HF, vLLM, SGLang) implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
import torch
from omegaconf import OmegaConf
from transformers import GenerationConfig

from core.batch import RESPONSE_ALIGNED, Batch


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    max_new_tokens: int = 32
    seed: int | None = 0  # None: no per-call seed (faster in vLLM, but a call cannot be replayed)
    # False where only the tokens are read (validation, evaluation, rollout.calculate_log_probs=false): vLLM and
    # SGLang then skip their per-token log-prob bookkeeping, and `rollout_log_probs` are zeros.
    log_probs: bool = True
    # Also one greedy completion per prompt after the n samples, its rows marked GREEDY_BASELINE (ReMax's baseline):
    # `generate_rollout` hands it to the backend's `generate_with_greedy_baselines`.
    greedy_baseline: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY_BASELINE = "greedy_baseline"  # the non-tensor row marker of a greedy-baseline completion


@dataclass
class Completion:
    """One sampled continuation of a token prompt: the engine's ids verbatim and each one's log-prob."""
    token_ids: list[int]
    log_probs: list[float]


class RolloutBackend(ABC):
    """Turns a prompt batch into n responses per prompt with their rollout log-probs.

    `generate` returns the prompt batch repeated n times (interleaved, so a prompt's samples are
    adjacent) plus `prompts`, `responses`, `response_mask`, `rollout_log_probs` (B, T_resp) and
    the concatenated `input_ids`, `attention_mask`, `position_ids` (B, T_prompt + T_resp).
    """

    @abstractmethod
    def generate(self, prompts: Batch, params: SamplingParams) -> Batch: ...

    def generate_with_greedy_baselines(self, prompts: Batch, params: SamplingParams) -> Batch:
        """`generate`'s n samples per prompt, then one greedy completion per prompt, marked True in
        GREEDY_BASELINE: two engine calls here; an engine that decodes both in one batch overrides it."""
        sampled = self.generate(prompts, params)
        greedy = self.generate(prompts, greedy_baseline_params(params))
        return with_greedy_baselines(sampled, greedy, self.tokenizer.pad_token_id)

    @abstractmethod
    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Receive the trained policy's full state dict (weight sync after an update)."""

    def generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams, max_new_tokens: list[int],
                     stop: tuple[str, ...] = ()) -> list[Completion]:
        """Token in, token out, one sample per prompt (`params.n` is ignored): the multi-turn loop's engine call.
        `max_new_tokens`: each prompt's own budget; `stop`: strings that end a sample, kept in its ids."""
        raise NotImplementedError(f"{type(self).__name__} has no token-in/token-out generate: it cannot run "
                                  "rollout.multi_turn")

    def sleep(self) -> None:
        """Free rollout memory while training runs (meaningful for vLLM/SGLang)."""

    def wake_up(self) -> None:
        """Take the memory back before the next rollout."""


def generate_rollout(rollout: RolloutBackend, prompts: Batch, params: SamplingParams) -> Batch:
    """What a worker calls: the samples, and with `params.greedy_baseline` the greedy completions after them."""
    if params.greedy_baseline:
        return rollout.generate_with_greedy_baselines(prompts, replace(params, greedy_baseline=False))
    return rollout.generate(prompts, params)


def greedy_baseline_params(params: SamplingParams) -> SamplingParams:
    return replace(params, n=1, temperature=0.0, greedy_baseline=False)


def with_greedy_baselines(sampled: Batch, greedy: Batch, pad_token_id: int) -> Batch:
    """The samples, then the greedy completions, each row marked in GREEDY_BASELINE."""
    sampled.non_tensors[GREEDY_BASELINE] = np.zeros(len(sampled), dtype=bool)
    greedy.non_tensors[GREEDY_BASELINE] = np.ones(len(greedy), dtype=bool)
    return concat_rollouts([sampled, greedy], pad_token_id)


def split_greedy_baselines(batch: Batch) -> tuple[Batch, Batch]:
    """(the samples, the greedy completions) of a batch `generate_rollout` made with `greedy_baseline`."""
    marked = np.asarray(batch.non_tensors[GREEDY_BASELINE], dtype=bool)
    parts = batch.select(~marked), batch.select(marked)
    for part in parts:
        del part.non_tensors[GREEDY_BASELINE]
    return parts


def extra_engine_kwargs(rollout_cfg) -> dict:
    """`rollout.engine_kwargs`: engine arguments the user adds or overrides (e.g. SGLang's attention_backend),
    applied after the backend's own, so a setting the backend chose can be changed without editing it."""
    extra = rollout_cfg.get("engine_kwargs") or {}
    return dict(OmegaConf.to_container(extra) if OmegaConf.is_config(extra) else extra)


def uses_stop_strings(rollout_cfg) -> bool:
    """Whether the rollout ends samples on stop strings (multi-turn tag actions), which the engines match on text:
    vLLM and SGLang then need their own detokenizer."""
    multi_turn = rollout_cfg.get("multi_turn") or {}
    return bool(multi_turn.get("enable")) and multi_turn.get("format") == "tags"


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch ops of the calling thread on one CPU thread, for the rollout's bookkeeping around an engine call: small
    tensor ops, each of which, fanned out over torch's thread pool on a host busy with engine and trainer processes,
    waits for its slowest thread's turn on a core (on a busy H200 host our backends spent 0.23-0.31 s of every
    256 × 256-token call outside the engine before this, 0.045-0.068 s after: results/perf)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def unpadded_prompt_ids(prompts: Batch) -> list[list[int]]:
    """Each prompt's tokens without its left padding, as the engines take them."""
    with one_torch_thread():
        return [ids[mask.bool()].tolist() for ids, mask in zip(prompts["input_ids"], prompts["attention_mask"])]


def response_mask_from_ids(responses: torch.Tensor, stop_ids: int | Collection[int]) -> torch.Tensor:
    """1 up to and including the first stop token (`stop_token_ids`, or one EOS id), 0 after: generation pads
    finished rows."""
    stops = torch.tensor(sorted({stop_ids} if isinstance(stop_ids, int) else set(stop_ids)), dtype=responses.dtype)
    is_stop = torch.isin(responses, stops)  # (B, T_resp)
    stop_seen_before = (is_stop.cumsum(dim=1) - is_stop.long()) > 0
    return (~stop_seen_before).long()


def stop_token_ids(tokenizer, model_path: str) -> frozenset[int]:
    """The ids an engine ends a response on: the tokenizer's EOS and the model's own end-of-turn ids
    (generation_config.json's `eos_token_id`, one id or a list), which vLLM and SGLang stop on as well."""
    try:
        model_eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:  # no generation_config.json: the tokenizer's EOS alone
        model_eos = None
    ids = {tokenizer.eos_token_id, *(model_eos if isinstance(model_eos, list) else [model_eos])}
    return frozenset(token for token in ids if token is not None)


def assemble_rollout(prompts: Batch, responses: torch.Tensor, rollout_log_probs: torch.Tensor,
                     response_mask: torch.Tensor, n: int, response_attention: torch.Tensor | None = None) -> Batch:
    """Join repeated prompts and generated responses (with the mask of their sampled tokens) into the batch the
    trainer consumes. `response_attention`: the response's real tokens where they are more than the sampled ones
    (a multi-turn response holds tool observations, attended to but never trained on); default `response_mask`."""
    repeated = prompts.repeat(n, interleave=True)
    prompt_ids, prompt_mask = repeated["input_ids"], repeated["attention_mask"]
    response_attention = response_mask if response_attention is None else response_attention
    attention_mask = torch.cat([prompt_mask, response_attention], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    tensors = {
        "prompts": prompt_ids,
        "responses": responses,
        "response_mask": response_mask,
        "rollout_log_probs": rollout_log_probs * response_mask,
        "input_ids": torch.cat([prompt_ids, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
    }
    out = Batch(tensors, dict(repeated.non_tensors), dict(repeated.meta))
    return out.check("rollout", expected_size=len(prompts) * n)


@one_torch_thread()
def rollout_from_token_lists(prompts: Batch, token_ids: list[list[int]], log_probs: list[list[float]],
                             pad_token_id: int, n: int, sampled_masks: list[list[int]] | None = None) -> Batch:
    """The rollout batch of responses given as token lists (one per sample, in the order of `prompts`
    repeated n times, interleaved) with each token's log-prob: right-padded, then `assemble_rollout`.

    Each response is exactly the tokens the engine returned, its stop token included: the mask comes from the
    lengths, not from an EOS id, since an engine also stops on the model's own end-of-turn tokens
    (generation_config.json), which need not be the tokenizer's EOS. `sampled_masks`: 1 on the tokens the engine
    sampled, 0 on those a multi-turn rollout inserted (tool observations); default all sampled."""
    width = max(1, max(len(ids) for ids in token_ids))
    lengths = torch.tensor([len(ids) for ids in token_ids])
    response_mask = (torch.arange(width) < lengths[:, None]).long()  # (B, T_resp)
    responses = torch.full((len(token_ids), width), pad_token_id, dtype=torch.long)  # (B, T_resp)
    padded_log_probs = torch.zeros((len(token_ids), width), dtype=torch.float32)  # (B, T_resp)
    for row, (ids, row_log_probs) in enumerate(zip(token_ids, log_probs, strict=True)):
        if row_log_probs and len(row_log_probs) != len(ids):  # a shifted log-prob would pass unnoticed as a mismatch
            raise ValueError(f"rollout row {row}: the engine returned {len(ids)} tokens but {len(row_log_probs)} "
                             "log-probs; expected one log-prob per generated token")
        responses[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        padded_log_probs[row, : len(row_log_probs)] = torch.tensor(row_log_probs, dtype=torch.float32)
    if sampled_masks is None:
        return assemble_rollout(prompts, responses, padded_log_probs, response_mask, n)
    sampled = torch.zeros_like(response_mask)  # (B, T_resp)
    for row, mask in enumerate(sampled_masks):
        sampled[row, : len(mask)] = torch.tensor(mask, dtype=torch.long)
    return assemble_rollout(prompts, responses, padded_log_probs, sampled, n, response_attention=response_mask)


def concat_rollouts(batches: list[Batch], pad_token_id: int) -> Batch:
    """Concatenate rollout batches of different widths (e.g. several generation rounds of a step).

    Each rollout is only as wide as its longest prompt and response, so before `Batch.concat` the
    prompt side is left-padded and the response side right-padded to the widest; the responses stay
    the last T_resp tokens of `input_ids`, and `position_ids` are recomputed from the new mask.
    """
    if len(batches) == 1:  # already as wide as itself (a schedule's batch generated in one part)
        return batches[0]
    prompt_width = max(b["prompts"].shape[1] for b in batches)
    response_width = max(b["responses"].shape[1] for b in batches)
    padded = []
    for batch in batches:
        left, right = prompt_width - batch["prompts"].shape[1], response_width - batch["responses"].shape[1]
        tensors = dict(batch.tensors)
        for key, value in batch.tensors.items():
            if key == "prompts":
                sides = (left, 0)
            elif key in ("input_ids", "attention_mask", "position_ids"):
                sides = (left, right)
            elif key in RESPONSE_ALIGNED:
                sides = (0, right)
            else:
                continue  # not sequence-shaped
            fill = pad_token_id if key in ("prompts", "input_ids", "responses") else 0
            tensors[key] = torch.nn.functional.pad(value, sides, value=fill)
        tensors["position_ids"] = (tensors["attention_mask"].cumsum(dim=1) - 1).clamp(min=0)
        padded.append(Batch(tensors, dict(batch.non_tensors), dict(batch.meta)))
    return Batch.concat(padded)
