"""`rollout.multi_turn`: episodes where the policy calls tools between its turns, as a rollout backend any recipe uses.

`MultiTurnRollout` wraps an engine (HF, vLLM, SGLang) and runs all live episodes of a batch turn by turn: one engine
call per turn (token in, token out, each episode with the response budget it has left), then the turn's tool calls,
run concurrently. An episode's response is its assistant turns (the sampled ids, verbatim; `response_mask` 1) and
the text between them (end of turn, tool messages, next generation prompt, from the chat template:
`core/data/turn_template.py`; `response_mask` 0, attended to but never trained on, its rollout log-probs 0). Groups
for GRPO-style advantages are the n episodes of one prompt, as in a single-turn rollout.

An episode ends (`multi_turn/stop_reason/<reason>`) when its turn has no tool call (`stop` after calling tools,
`no_tool_call` if it never did), its response budget `data.max_response_length` runs out (`length`; a call cut by
the budget is never run), its last allowed turn still calls a tool (`max_turns`), its environment is done
(`env_done`), or its environment failed (`env_error`: `reset` or `done` raised; the episode scores 0 and its error
is counted in `reward/error_count`). An environment's `reward` that raises, or returns anything but a finite number
(NaN, a string), scores 0 with the reason as the row's reward error (`reward/error_count`), never the step's end.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import time
from dataclasses import dataclass, field, replace

import numpy as np

from core.batch import Batch
from core.data.dataset import left_padded
from core.data.turn_template import TurnTemplate, matches_full_render
from core.rollout.base import Completion, RolloutBackend, SamplingParams, rollout_from_token_lists, unpadded_prompt_ids
from core.rollout.multi_turn.actions import ToolCall, parse_calls
from core.rollout.multi_turn.tools import ToolRunner, ToolSpec, call_tool

logger = logging.getLogger(__name__)
STOP_REASONS = ("stop", "no_tool_call", "length", "max_turns", "env_done", "env_error")


@dataclass(frozen=True)
class MultiTurnSettings:
    action_format: str = "chat"  # chat | tags (actions.py)
    max_turns: int = 4
    max_response_length: int = 256
    max_tool_response_chars: int = 2000
    max_concurrent_tools: int = 8
    tool_timeout_s: float = 60.0
    check_template: bool = False
    tool_role: str = "tool"


@dataclass
class Episode:
    row: dict
    tools: dict
    env: object | None
    prompt_ids: list[int]
    messages: list[dict]  # the conversation so far, for the full-render check
    response_ids: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)  # 1 where the engine sampled the token
    log_probs: list[float] = field(default_factory=list)
    turns: int = 0
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    tool_wall_s: float = 0.0  # its share of the wall time the batch's tool phases took (split evenly)
    stop_reason: str | None = None
    env_error: str | None = None  # why the environment failed: the row's reward error


class MultiTurnRollout(RolloutBackend):
    def __init__(self, engine: RolloutBackend, tokenizer, spec: ToolSpec, settings: MultiTurnSettings,
                 template: TurnTemplate):
        self.engine, self.tokenizer, self.spec, self.settings = engine, tokenizer, spec, settings
        self.template = template
        self.stop = tuple(f"</{name}>" for name in spec.names) if settings.action_format == "tags" else ()
        self._tools = ToolRunner(settings.max_concurrent_tools, settings.tool_timeout_s)

    # ---- the rollout contract: weights and memory are the engine's --------------------------------
    def load_weights(self, weights) -> None:
        self.engine.load_weights(weights)

    def load_adapter(self, adapter_dir: str) -> None:
        self.engine.load_adapter(adapter_dir)

    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()

    # ---- the loop -------------------------------------------------------------------------------
    def generate(self, prompts: Batch, params: SamplingParams) -> Batch:
        repeated = prompts.repeat(params.n, interleave=True)
        episodes = [self._start(repeated, row, ids) for row, ids in enumerate(unpadded_prompt_ids(repeated))]
        for turn in range(self.settings.max_turns):
            live = [episode for episode in episodes if episode.stop_reason is None]
            if not live:
                break
            budgets = [self.settings.max_response_length - len(episode.response_ids) for episode in live]
            completions = self.engine.generate_ids([e.prompt_ids + e.response_ids for e in live],
                                                   replace(params, n=1, seed=turn_seed(params.seed, turn)), budgets,
                                                   self.stop)
            last_turn = turn == self.settings.max_turns - 1
            pending = [(episode, calls) for episode, completion, budget in zip(live, completions, budgets, strict=True)
                       if (calls := self._take_turn(episode, completion, budget, last_turn))]
            start = time.perf_counter()
            outcomes_by_episode = self._run_calls(pending)
            elapsed = time.perf_counter() - start
            for episode, _ in pending:  # shares add up to the phase's wall time, whatever the concurrency
                episode.tool_wall_s += elapsed / len(pending)
            for (episode, calls), outcomes in zip(pending, outcomes_by_episode, strict=True):
                self._observe(episode, calls, outcomes)
        return self._to_batch(repeated, episodes)

    def _start(self, repeated: Batch, row: int, prompt_ids: list[int]) -> Episode:
        values = {key: repeated.non_tensors[key][row] for key in repeated.non_tensors}
        messages = [dict(message) for message in values.get("raw_prompt", [])]
        try:
            tools, env, first_observation = self.spec.new_episode(values)
        except Exception as error:  # the environment's bug or a row it cannot read: this episode ends unstarted
            episode = Episode(values, {}, None, prompt_ids, messages, stop_reason="env_error")
            episode.env_error = f"environment reset failed: {type(error).__name__}: {error}"
            return episode
        if first_observation is not None:  # the environment's opening words: a user message after the prompt
            messages.append({"role": "user", "content": first_observation})
            prompt_ids = self.template.prompt_ids(messages)
        return Episode(values, tools, env, prompt_ids, messages)

    def _take_turn(self, episode: Episode, completion: Completion, budget: int, last_turn: bool) -> list[ToolCall]:
        """Append the sampled turn; return its tool calls to run, or [] when the episode ends here."""
        ids = completion.token_ids
        episode.response_ids += ids
        episode.sampled += [1] * len(ids)
        episode.log_probs += completion.log_probs or [0.0] * len(ids)
        episode.turns += 1
        ended_on_stop = bool(ids) and ids[-1] in self.template.stop_ids
        content_ids = ids[:-1] if ended_on_stop else ids
        text = self.tokenizer.decode(content_ids)
        episode.messages.append({"role": "assistant", "content": text})
        ended_on_stop = ended_on_stop or (bool(self.stop) and text.endswith(self.stop))
        if not ended_on_stop and len(ids) >= budget:
            episode.stop_reason = "length"  # a call cut by the budget is never run
            return []
        calls = parse_calls(text, self.settings.action_format, self.spec.names)
        if not calls:
            episode.stop_reason = "stop" if episode.calls else "no_tool_call"
        elif last_turn:
            episode.stop_reason = "max_turns"
        return [] if episode.stop_reason else calls

    def _run_calls(self, pending: list[tuple[Episode, list[ToolCall]]]) -> list[list[tuple[str, str | None]]]:
        """Every call of the turn at once (at most `max_concurrent_tools` running), grouped back by episode."""
        futures = [[self._tools.submit(_run_one, episode.tools, call) for call in calls] for episode, calls in pending]
        return [[future.result() for future in episode_futures] for episode_futures in futures]

    def _observe(self, episode: Episode, calls: list[ToolCall], outcomes: list[tuple[str, str | None]]) -> None:
        episode.calls += len(calls)
        episode.errors += sum(status == "error" for _, status in outcomes)
        episode.timeouts += sum(status == "timeout" for _, status in outcomes)
        limit = self.settings.max_tool_response_chars
        tool_messages = [{"role": self.settings.tool_role, "content": cut_middle(text, limit)} for text, _ in outcomes]
        if episode.env is not None and self._env_done(episode, episode.messages + tool_messages):
            return
        after = self.template.after_turn_ids(episode.response_ids, tool_messages)
        room = self.settings.max_response_length - len(episode.response_ids)
        if len(after) >= room:  # no token left for another turn: what fits, and the episode ends
            after, episode.stop_reason = after[:room], "length"
        episode.response_ids += after
        episode.sampled += [0] * len(after)
        episode.log_probs += [0.0] * len(after)
        episode.messages += tool_messages

    @staticmethod
    def _env_done(episode: Episode, messages: list[dict]) -> bool:
        """Whether the environment ends the episode here (`env_done`, or `env_error` when asking it raised)."""
        try:
            done = episode.env.is_done(messages) if callable(getattr(episode.env, "is_done", None)) else \
                getattr(episode.env, "done", False)
        except Exception as error:
            episode.stop_reason, episode.env_error = "env_error", f"environment done failed: {type(error).__name__}: " \
                                                                  f"{error}"
            return True
        if done:
            episode.stop_reason = "env_done"
        return bool(done)

    # ---- the batch --------------------------------------------------------------------------------
    def _to_batch(self, repeated: Batch, episodes: list[Episode]) -> Batch:
        input_ids, attention_mask = left_padded([episode.prompt_ids for episode in episodes],
                                                self.tokenizer.pad_token_id)
        prompts = Batch({"input_ids": input_ids, "attention_mask": attention_mask}, dict(repeated.non_tensors),
                        dict(repeated.meta))
        batch = rollout_from_token_lists(prompts, [e.response_ids for e in episodes], [e.log_probs for e in episodes],
                                         self.tokenizer.pad_token_id, 1, sampled_masks=[e.sampled for e in episodes])
        batch.non_tensors.update(self._episode_values(episodes))
        return batch

    def _episode_values(self, episodes: list[Episode]) -> dict[str, np.ndarray]:
        values = {
            "multi_turn_turns": [episode.turns for episode in episodes],
            "multi_turn_stop_reason": [episode.stop_reason for episode in episodes],
            "tool_calls": [episode.calls for episode in episodes],
            "tool_errors": [episode.errors for episode in episodes],
            "tool_timeouts": [episode.timeouts for episode in episodes],
            "tool_wall_s": [episode.tool_wall_s for episode in episodes],
        }
        scores = [env_reward(episode) for episode in episodes]
        values["env_reward"] = [score for score, _ in scores]
        values["env_reward_error"] = [error for _, error in scores]
        if self.settings.check_template:
            values["template_mismatch"] = [
                int(not matches_full_render(self.template, e.messages, e.prompt_ids + e.response_ids,
                                            cut=e.stop_reason == "length"))
                for e in episodes]
        return {key: np.array(column, dtype=object) for key, column in values.items()}


def _run_one(tools: dict, call: ToolCall) -> tuple[str, str | None]:
    if call.error is not None:
        return call.error, "error"
    return call_tool(tools, call.name, call.arguments)


def env_reward(episode: Episode) -> tuple[float | None, str | None]:
    """(the environment's score for its episode, why it has none), then its `close()`.

    (None, None) without an environment or without `reward()`: the data source's scorer scores the episode. A failed
    environment, or a reward that raises or is not a finite number, scores (0.0, the reason)."""
    env = episode.env
    if episode.env_error is not None:
        return 0.0, episode.env_error
    if env is None:
        return None, None
    score, error = None, None
    if callable(getattr(env, "reward", None)):
        try:
            value = env.reward(episode.messages) if _takes_an_argument(env.reward) else env.reward()
            score, error = _finite(value)
        except Exception as exception:
            score, error = 0.0, f"environment reward() raised {type(exception).__name__}: {exception}"
    if callable(getattr(env, "close", None)):
        try:
            env.close()
        except Exception as exception:  # the episode is scored already: a failing close is only logged
            logger.warning("environment close() raised %s: %s", type(exception).__name__, exception)
    return score, error


def _finite(value) -> tuple[float, str | None]:
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        return float(value), None
    return 0.0, f"environment reward() returned {value!r} ({type(value).__name__}); expected a finite number"


def _takes_an_argument(method) -> bool:
    return len(inspect.signature(method).parameters) >= 1


def cut_middle(text: str, limit: int) -> str:
    """At most about `limit` characters: the head and the tail, with how much was cut between them (a tool's last
    lines, e.g. a traceback's, matter as much as its first)."""
    if len(text) <= limit:
        return text
    head, tail = limit // 2, limit - limit // 2
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[len(text) - tail:]}"


def turn_seed(seed: int | None, turn: int) -> int | None:
    """Each turn's engine call its own seed: replayable, and unrelated to the other turns' streams."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, turn]).generate_state(1)[0] >> 1)
