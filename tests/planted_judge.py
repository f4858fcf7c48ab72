"""A fake LLM-judge engine of planted texts, for the judge tests (no judge model is trained to grade here), and the
Ray worker setup hook that makes it every Ray worker's judge engine."""

import sys
from pathlib import Path

REPO = str(Path(__file__).resolve().parents[1])  # the checkout these tests run from

RAY_PLANTED = ["Looks right. Score: 8", "no idea"]  # what each Ray worker's judge answers, in turn


class PlantedJudge:
    """A fake judge engine (no judge model is trained to grade here): it answers the prompts with planted texts
    in order, and records what it was asked."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.calls = tokenizer, list(texts), []

    def generate_ids(self, prompt_ids, params, max_new_tokens, stop=()):
        from core.rollout.base import Completion  # here: a Ray worker unpickles this class before `core` is found

        self.calls.append([self.tokenizer.decode(ids) for ids in prompt_ids])
        answers, self.texts = self.texts[:len(prompt_ids)], self.texts[len(prompt_ids):]
        return [Completion(self.tokenizer.encode(text, add_special_tokens=False), []) for text in answers]

    def wake_up(self):
        pass

    def sleep(self):
        pass


def plant_judge_texts():
    """Ray's `worker_process_setup_hook` (sent by value: a worker cannot import tests/): in each worker, before
    any role is built, the judge's engine is a PlantedJudge answering RAY_PLANTED in turn."""
    # The hook runs before Ray puts the driver's import path on the worker's: without the checkout first, `core`
    # would be whichever recipezoo is installed, not the one under test.
    sys.path.insert(0, REPO)
    import core.trainer.judge_worker as judge_worker

    judge_worker.build_engine = lambda config, path, tokenizer, load_model: PlantedJudge(tokenizer, RAY_PLANTED * 64)
