"""`rollout.multi_turn` from config: its checks before anything starts, and the rollout it builds.

Every refusal is one line naming the key: checked with the rest of the config (`check_multi_turn`, which also
imports the tools, so a wrong path or a tool without type hints fails before any model loads) and, once the
tokenizer exists, the chat template (`check_template_keeps_turns`), before any engine starts.
"""

from __future__ import annotations

from pathlib import Path

from core.config import ConfigError
from core.data.turn_template import TemplateError, TurnTemplate, check_template_keeps_turns
from core.rollout.base import RolloutBackend
from core.rollout.multi_turn.loop import MultiTurnRollout, MultiTurnSettings
from core.rollout.multi_turn.tools import ToolSpec
from core.rollout.multi_turn.verifiers_env import VERIFIERS_ENV_PREFIX


def enabled(rollout_cfg) -> bool:
    return bool((rollout_cfg.get("multi_turn") or {}).get("enable"))


def check_multi_turn(resolved: dict) -> None:
    """What only a multi-turn run needs (types, ranges and the format are core/trainer/config_checks.py's shared checks)."""
    rollout, trainer = resolved["rollout"], resolved["trainer"]
    settings = rollout["multi_turn"]
    if not settings["enable"]:
        return
    if trainer["partial_rollout"]:
        raise ConfigError("trainer.partial_rollout=true with rollout.multi_turn.enable=true — a partial rollout "
                          "would resume an episode on newer weights, mixing two policies inside one episode; set "
                          "trainer.partial_rollout=false")
    if rollout["tensor_model_parallel_size"] > 1:
        raise ConfigError("rollout.tensor_model_parallel_size > 1 with rollout.multi_turn.enable=true — the engine "
                          "ranks of one tensor-parallel group would each run their own episodes; use 1")
    spec = ToolSpec(settings["tools"], settings["env"])
    if settings["format"] == "tags":
        for schema in spec.schemas:
            params = schema["function"].get("parameters", {}).get("properties", {})
            if len(params) != 1:
                raise ConfigError(f"rollout.multi_turn.format=tags: tool {schema['function']['name']} takes "
                                  f"{len(params)} arguments; a tag action passes one string, so use format=chat")


def pin_tool_paths(multi_turn) -> None:
    """`file.py:name` specs made absolute, in place: Ray's workers need not start in the driver's directory."""
    def absolute(spec: str) -> str:
        path, _, name = spec.rpartition(":")
        return f"{Path(path).resolve()}:{name}" if path.endswith(".py") else spec

    multi_turn.tools = [absolute(spec) for spec in multi_turn.tools]
    if multi_turn.env and multi_turn.env.startswith(VERIFIERS_ENV_PREFIX):
        multi_turn.env = VERIFIERS_ENV_PREFIX + absolute(multi_turn.env[len(VERIFIERS_ENV_PREFIX):])
    elif multi_turn.env:
        multi_turn.env = absolute(multi_turn.env)


def template_kwargs(rollout_cfg, spec: ToolSpec) -> dict:
    """What every chat-template render of a multi-turn run gets: the tools' schemas, for the template to show the
    model (format=chat); a tag-action task describes its tags in the prompt itself."""
    return {"tools": spec.schemas} if rollout_cfg.multi_turn.format == "chat" else {}


def tool_spec(rollout_cfg) -> ToolSpec:
    return ToolSpec(list(rollout_cfg.multi_turn.tools), rollout_cfg.multi_turn.env)


def checked_template(rollout_cfg, tokenizer, stop_ids=()) -> TurnTemplate:
    template = TurnTemplate(tokenizer, template_kwargs(rollout_cfg, tool_spec(rollout_cfg)), stop_ids)
    try:
        check_template_keeps_turns(template, rollout_cfg.multi_turn.tool_role)
    except TemplateError as error:
        raise ConfigError(str(error)) from None
    return template


def build_multi_turn(config, engine: RolloutBackend, tokenizer, stop_ids) -> MultiTurnRollout:
    multi_turn = config.rollout.multi_turn
    settings = MultiTurnSettings(
        action_format=multi_turn.format, max_turns=multi_turn.max_turns,
        max_response_length=config.data.max_response_length,
        max_tool_response_chars=multi_turn.max_tool_response_chars,
        max_concurrent_tools=multi_turn.max_concurrent_tools, tool_timeout_s=multi_turn.tool_timeout_s,
        check_template=multi_turn.check_template,
        tool_role=multi_turn.tool_role)
    return MultiTurnRollout(engine, tokenizer, tool_spec(config.rollout), settings,
                            checked_template(config.rollout, tokenizer, stop_ids))
