"""`rollout.multi_turn.env=verifiers:module:TasksetClass`: a `verifiers` (v1) taskset as a multi-turn environment.

verifiers (`pip install "recipezoo[verifiers]"`, the environment package prime-rl trains on) runs an episode as a
harness program talking to an OpenAI-compatible endpoint, with its tools as MCP servers in a runtime. Here the policy's
turns stay recipezoo's (token in, token out; `loop.py`), and the environment is used at its API level, in process:
- the task: rebuilt from the row's `extra_info.verifiers_task` (rows from `data.train_files=verifiers://module:Class`,
  `core/data/verifiers_tasks.py`), its system prompt and prompt being the row's prompt;
- the tools: the `@vf.tool` methods of `Task.toolsets(config)` (one instance per episode) and `Taskset.toolsets`
  (one per run), registered on an in-process MCP server, so the model sees the schemas and names (`<server>_<tool>`,
  or bare with `TOOL_PREFIX = None`) verifiers would advertise, and a call goes through MCP's argument validation; a
  tool's error is the observation (`tool/errors`);
- when it ends: the task's `@vf.stop` predicates on the `Trace` after each tool turn (`multi_turn/stop_reason/env_done`);
- the reward: `Task.score(trace)` — its `@vf.reward`s, weighted, summed (`Trace.reward`) — on a `Trace` of the episode's
  messages: the assistant turns as decoded from the sampled tokens, the tool replies as the model saw them.
What needs verifiers' machinery is refused when the run is configured, naming the task: a task that needs a container
or overrides `setup`/`finalize` (a runtime), judges (an LLM client), `@vf.stop`s on a `Request`/`Response`, rewards
that need a runtime. Assistant messages carry their text only (no parsed `tool_calls`); token ids are recipezoo's,
so the trace's `nodes` hold no tokens.
"""

from __future__ import annotations

import asyncio
import inspect
import json

from core.config import ConfigError
from core.data.rows import DataError
from core.data.verifiers_tasks import TASK_KEY, import_verifiers, load_taskset_class, new_taskset

VERIFIERS_ENV_PREFIX = "verifiers:"
ENV_KEY = "rollout.multi_turn.env"


class VerifiersTaskset:
    """What a `ToolSpec` needs of an environment: the tools' schemas, and a fresh environment per episode."""

    def __init__(self, spec: str):
        self.spec = spec
        try:
            self.taskset = new_taskset(load_taskset_class(spec, ENV_KEY, VERIFIERS_ENV_PREFIX))
        except DataError as error:
            raise ConfigError(str(error)) from None
        self.task_class = type(self.taskset).task_type()
        self.data_class = self.task_class.data_type()
        self.task_config = self.taskset.config.task
        check_supported(self.task_class, self.task_config, f"{ENV_KEY}=verifiers:{spec}")
        self.shared_servers = mcp_servers(type(self.taskset).toolsets(self.taskset.config))
        self.schemas, _ = tool_schemas(self.shared_servers + mcp_servers(self.task_class.toolsets(self.task_config)))

    def __call__(self) -> VerifiersEpisode:
        return VerifiersEpisode(self)


class VerifiersEpisode:
    """One episode's task, tools, stop predicates and reward. Its hooks are the recipezoo environment protocol
    (`reset`, `is_done`, `reward`, `close`; tools.py)."""

    def __init__(self, owner: VerifiersTaskset):
        self.owner = owner
        self.task = None
        self.tools: dict[str, object] = {}

    def reset(self, row: dict) -> None:
        extra = row.get("extra_info") or {}
        if TASK_KEY not in extra:
            raise ValueError(f"{ENV_KEY}=verifiers:{self.owner.spec}: the row has no extra_info.{TASK_KEY}; "
                             f"make the data with data.train_files=verifiers://{self.owner.spec}")
        data = self.owner.data_class.model_validate(json.loads(extra[TASK_KEY]))
        self.task = self.owner.task_class(data, self.owner.task_config)
        toolsets = self.owner.task_class.toolsets(self.owner.task_config)  # per rollout, as verifiers launches them
        for toolset in toolsets:
            asyncio.run(_setup(toolset, self.task))
        _, dispatch = tool_schemas(self.owner.shared_servers + mcp_servers(toolsets))
        self.tools = {name: _McpTool(server, raw, parameters) for name, (server, raw, parameters) in dispatch.items()}

    def is_done(self, messages: list[dict]) -> bool:
        from verifiers.v1.session import call_hook

        trace = episode_trace(self.task, messages)
        return any(asyncio.run(call_hook(stop, {type(trace): trace, "trace": trace}))
                   for stop in self.task.hooks("stop"))

    def reward(self, messages: list[dict]) -> float:
        trace = episode_trace(self.task, messages)
        asyncio.run(self.task.score(trace))
        unscored = [name for name, reward in trace.rewards.items() if reward is None]
        if unscored:
            raise ValueError(f"rewards {unscored} did not score")
        return trace.reward


class _McpTool:
    """A tool call through the in-process MCP server: its argument validation, its text content as the reply."""

    def __init__(self, server, name: str, parameters: list[str]):
        self.server, self.name, self.parameters = server, name, parameters

    def __call__(self, arguments: str | None = None, **kwargs) -> str:
        if arguments is not None:  # a tag action: the tool's one argument (a one-parameter tool, checked at config)
            kwargs = {self.parameters[0]: arguments}
        result = asyncio.run(self.server.call_tool(self.name, kwargs))
        text = "\n".join(block.text if block.type == "text" else str(block) for block in result.content)
        if result.is_error:
            raise RuntimeError(text)
        return text


async def _setup(toolset, task) -> None:
    await toolset.setup()
    await toolset.setup_task(task)


def mcp_servers(toolsets: list) -> list[tuple[str, object]]:
    """(the tools' name prefix, an in-process MCP server) per toolset, as verifiers names them."""
    from mcp.server.mcpserver import MCPServer

    servers = []
    for toolset in toolsets:
        server = MCPServer(toolset.server_name or type(toolset).__name__)
        toolset.register(server)
        servers.append((toolset.server_name, server))
    return servers


def tool_schemas(servers: list[tuple[str, object]]) -> tuple[list[dict], dict[str, tuple[object, str, list[str]]]]:
    """(chat-template schemas, name -> (server, the tool's own name, its parameters)), as verifiers' harness
    names and describes them."""
    schemas, dispatch = [], {}
    for prefix, server in servers:
        for tool in asyncio.run(server.list_tools()):
            name = f"{prefix}_{tool.name}" if prefix else tool.name
            if name in dispatch:
                raise ConfigError(f"{ENV_KEY}: two tools are named {name!r}; give one toolset a distinct TOOL_PREFIX")
            schemas.append({"type": "function", "function": {"name": name, "description": tool.description or "",
                                                             "parameters": tool.input_schema}})
            dispatch[name] = (server, tool.name, list(tool.input_schema.get("properties", {})))
    return schemas, dispatch


def check_supported(task_class, task_config, key: str) -> None:
    """One line naming what this task needs of verifiers' harness machinery, which the adapter does not run."""
    vf = import_verifiers()
    from verifiers.v1.session import hook_boundary

    name = task_class.__name__
    needs = []
    if task_class.NEEDS_CONTAINER:
        needs.append("a container (NEEDS_CONTAINER)")
    needs += [f"a runtime ({hook} is overridden)" for hook in ("setup", "finalize", "stage_verifier")
              if getattr(task_class, hook) is not getattr(vf.Task, hook)]
    if task_config.judges:
        needs.append("an LLM judge client (judges)")
    probe = task_class.__new__(task_class)
    probe.config = task_config
    for stop in probe.hooks("stop"):
        if hook_boundary(stop, allow_trace=True) is not vf.Trace:
            needs.append(f"a model endpoint (@vf.stop {stop.__name__} reads a Request/Response)")
    for hook in probe.hooks("reward") + probe.hooks("metric"):
        parameter = inspect.signature(hook).parameters.get("runtime")
        if parameter is not None and parameter.default is inspect.Parameter.empty:
            needs.append(f"a runtime (@vf.reward/@vf.metric {hook.__name__} takes runtime)")
    if needs:
        raise ConfigError(f"{key}: task {name} needs {', '.join(needs)}, which recipezoo's in-process adapter does "
                          f"not provide; run it with verifiers' own harness")


def episode_trace(task, messages: list[dict]):
    """The episode as a verifiers `Trace`: one node per message, the assistant ones marked sampled."""
    vf = import_verifiers()
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask

    nodes, calls = [], 0
    for index, message in enumerate(messages):
        role, content = message["role"], message["content"]
        if role == "tool":
            converted = vf.ToolMessage(tool_call_id=f"call_{calls}", content=content)
            calls += 1
        else:
            converted = {"system": vf.SystemMessage, "user": vf.UserMessage,
                         "assistant": vf.AssistantMessage}[role](content=content)
        nodes.append(MessageNode(parent=index - 1 if index else None, message=converted, sampled=role == "assistant"))
    return vf.Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                    agent=AgentInfo(config=AgentConfig()), nodes=nodes)
