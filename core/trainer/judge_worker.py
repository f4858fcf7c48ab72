"""The LLM-judge role: a generative model grades each response through a rollout engine (the policy's engine
class by default: HF anywhere, vLLM or SGLang on a GPU), greedy, in batches of `reward.judge.batch_size`.

Its prompt is `reward.judge.template` filled with the question, the response and the reference answer, sent as
the judge's user message through its chat template; its answer is parsed by core/reward/judge.py. A verdict that
cannot be parsed scores `reward.judge.failure_score`, is counted in reward/judge/parse_failures and is shown in a
warning (the first few), so a judge that ignores the format is seen, never read as a silent 0.
"""

from __future__ import annotations

import logging

import torch
from omegaconf import OmegaConf

from core.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
from core.reward.judge import parse_judgement, question_text, render_prompt
from core.rollout.base import RolloutBackend, SamplingParams
from core.rollout.build import build_engine
from core.trainer.start_record import start_phase

logger = logging.getLogger(__name__)
MAX_FAILURE_WARNINGS = 3
TEMPLATE_ALLOWANCE = 1024  # tokens of template and question beyond the policy's prompt and response budgets


class JudgeWorker:
    """`engine`, `tokenizer`: a judge engine built elsewhere (a test's fake); default the configured one."""

    def __init__(self, config, device: torch.device, policy_tokenizer, engine: RolloutBackend | None = None,
                 tokenizer=None):
        self.settings, self.policy_tokenizer = config.reward.judge, policy_tokenizer
        self.start_record: dict[str, float] = {}  # seconds of the judge's start (start_record.py)
        if engine is None:
            with start_phase("judge", self.start_record):
                path = resolve_model_path(self.settings.model_path or config.model.path)
                tokenizer = load_tokenizer(path, trust_remote_code=config.model.trust_remote_code)
                engine = build_engine(judge_engine_config(config), path, tokenizer, lambda: load_causal_lm(
                    path, trust_remote_code=config.model.trust_remote_code).to(device))
        self.engine, self.tokenizer = engine, tokenizer
        self._warnings_left = MAX_FAILURE_WARNINGS

    def score(self, responses: list[str], raw_prompts: list, references: list) -> tuple[torch.Tensor, dict[str, float]]:
        """(B,) scores in [0, 1] and reward/judge/{parse_failures, parse_failure_frac}."""
        judge = self.settings
        prompts = [render_prompt(judge.template, question_text(raw), text, reference)
                   for text, raw, reference in zip(responses, raw_prompts, references)]
        verdicts = self.generate(prompts)
        parsed = [parse_judgement(text, judge.parser, float(judge.max_score)) for text in verdicts]
        failures = [row for row, value in enumerate(parsed) if value is None]
        for row in failures[: self._warnings_left]:
            self._warnings_left -= 1
            logger.warning("[reward] the judge's answer has no %s (scored %g, counted in reward/judge/parse_failures):"
                           " %r", judge.parser, judge.failure_score, verdicts[row][:300])
        scores = torch.tensor([float(judge.failure_score) if value is None else value for value in parsed])
        return scores, {"reward/judge/parse_failures": float(len(failures)),
                        "reward/judge/parse_failure_frac": len(failures) / max(1, len(parsed))}

    def generate(self, prompts: list[str]) -> list[str]:
        """The judge's greedy answer to each prompt, `reward.judge.batch_size` prompts per engine call."""
        judge = self.settings
        ids = [list(self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                       tokenize=True, return_dict=False)) for prompt in prompts]
        params = SamplingParams(n=1, temperature=0.0, max_new_tokens=judge.max_new_tokens, log_probs=False)
        texts = []
        self.engine.wake_up()
        try:
            for first in range(0, len(ids), judge.batch_size):
                chunk = ids[first:first + judge.batch_size]
                completions = self.engine.generate_ids(chunk, params, [judge.max_new_tokens] * len(chunk))
                texts += [self.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]
        finally:
            self.engine.sleep()
        return texts


def judge_engine_config(config):
    """The run's config as the judge's engine reads it: its own backend, memory share and token budgets."""
    judge = config.reward.judge
    copy = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    copy.rollout.name = judge.rollout_name or config.rollout.name
    copy.rollout.gpu_memory_utilization = judge.gpu_memory_utilization
    copy.rollout.max_model_len = None
    copy.model.init = "pretrained"
    copy.data.max_prompt_length = config.data.max_prompt_length + config.data.max_response_length + TEMPLATE_ALLOWANCE
    copy.data.max_response_length = judge.max_new_tokens
    return copy
