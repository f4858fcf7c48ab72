"""Tools a policy calls: plain Python functions, or the methods of an environment class, named in config.

A function tool is `path/to/file.py:name` or `package.module:name`, with type hints and a docstring: its JSON schema
(what a chat template shows the model) comes from them through `transformers.utils.get_json_schema`. An environment
is a class `path.py:Name` with `reset(row) -> str | None`, its tools as public methods, and optionally `reward()`
(the episode's score, used in place of the data source's scorer; a `reward(messages)` gets the conversation) and a
`done` attribute or an `is_done(messages)` method (the episode ends once it is true). Each episode gets its own
instance. `env=verifiers:module:TasksetClass` is a `verifiers` taskset instead (verifiers_env.py).

What a tool or an environment does wrong is the episode's, never the step's: a tool that raises gives the model its
error (`tool/errors`); one not back within `tool_timeout_s` gives a timeout note (`tool/timeouts`) and the episode
goes on. Function tools run in daemon threads, and a thread cannot be stopped: a hung one is left running (it does
not hold up the next calls, nor the trainer's exit). Code the model wrote belongs in the Python tool
(`core.rollout.multi_turn.python_tool:python`), a subprocess killed at its deadline.
"""

from __future__ import annotations

import inspect
import threading
from concurrent.futures import Future

from transformers.utils import get_json_schema

from core.config import ConfigError
from core.module_import import import_module_or_file
from core.rollout.multi_turn.verifiers_env import VERIFIERS_ENV_PREFIX, VerifiersEpisode, VerifiersTaskset

ENV_HOOKS = ("reset", "reward", "close", "is_done")  # methods of an environment that are not tools


class ToolTimeout(Exception):
    """Raised by a tool that ran out of time: the message becomes the observation, counted in `tool/timeouts`."""


def load_object(spec: str, key: str):
    """`file.py:name` (a path, relative to the working directory) or `module:name`."""
    module_name, _, attribute = str(spec).rpartition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{key}={spec!r}: expected path/to/file.py:name or package.module:name")
    try:
        module = import_module_or_file(module_name, "recipezoo_tools_")
    except FileNotFoundError as error:
        raise ConfigError(f"{key}={spec!r}: {error}") from None
    except ImportError as error:
        raise ConfigError(f"{key}={spec!r}: cannot import {module_name} ({error})") from error
    if not hasattr(module, attribute):
        raise ConfigError(f"{key}={spec!r}: {module_name} has no {attribute!r}")
    return getattr(module, attribute)


def tool_schema(function, key: str) -> dict:
    """The tool's JSON schema, or one line naming what its signature or docstring lacks."""
    name = getattr(function, "__name__", repr(function))
    try:
        return get_json_schema(function)
    except Exception as error:  # transformers raises its own parsing exceptions, and ValueError for a bare function
        raise ConfigError(f"{key}: tool {name} needs type hints on every argument and a docstring with an Args: "
                          f"section describing each ({error})") from error


def environment_tools(instance) -> dict[str, object]:
    """The bound public methods of an environment instance that are its tools."""
    return {name: method for name, method in inspect.getmembers(instance, inspect.ismethod)
            if not name.startswith("_") and name not in ENV_HOOKS}


class ToolSpec:
    """What `rollout.multi_turn` names: function tools, or an environment class, with their schemas."""

    def __init__(self, tools: list[str], env: str | None):
        if tools and env:
            raise ConfigError("rollout.multi_turn: set tools or env, not both (an environment's tools are its methods)")
        if not tools and not env:
            raise ConfigError("rollout.multi_turn.enable=true needs tools=[file.py:function, ...] or env=file.py:Class")
        self.env_class = None
        self.functions: dict[str, object] = {}
        if env and env.startswith(VERIFIERS_ENV_PREFIX):
            self.env_class = VerifiersTaskset(env[len(VERIFIERS_ENV_PREFIX):])
            self.schemas = self.env_class.schemas
        elif env:
            self.env_class = load_object(env, "rollout.multi_turn.env")
            missing = [hook for hook in ("reset",) if not callable(getattr(self.env_class, hook, None))]
            if not inspect.isclass(self.env_class) or missing:
                raise ConfigError(f"rollout.multi_turn.env={env!r}: expected a class with a reset(row) method")
            methods = {name: getattr(self.env_class, name) for name, _ in inspect.getmembers(self.env_class,
                                                                                            inspect.isfunction)
                       if not name.startswith("_") and name not in ENV_HOOKS}
            if not methods:
                raise ConfigError(f"rollout.multi_turn.env={env!r}: the class has no public methods to call as tools")
            self.schemas = [tool_schema(method, "rollout.multi_turn.env") for method in methods.values()]
        else:
            for index, spec in enumerate(tools):
                function = load_object(spec, f"rollout.multi_turn.tools[{index}]")
                if not callable(function):
                    raise ConfigError(f"rollout.multi_turn.tools[{index}]={spec!r} is not callable")
                self.functions[function.__name__] = function
            self.schemas = [tool_schema(f, f"rollout.multi_turn.tools[{i}]") for i, f in
                            enumerate(self.functions.values())]

    @property
    def names(self) -> list[str]:
        return [schema["function"]["name"] for schema in self.schemas]

    def new_episode(self, row: dict) -> tuple[dict[str, object], object | None, str | None]:
        """(tool name -> callable, the environment instance or None, reset's first observation or None)."""
        if self.env_class is None:
            return dict(self.functions), None, None
        env = self.env_class()
        first = env.reset(row)
        return (env.tools if isinstance(env, VerifiersEpisode) else environment_tools(env)), env, first


def call_tool(tools: dict[str, object], name: str, arguments) -> tuple[str, str | None]:
    """(observation, None) or (error text, "error" | "timeout"): a tool's failure is the model's to read,
    never the run's end."""
    if name not in tools:
        return f"error: unknown tool {name!r}; the tools are {sorted(tools)}", "error"
    try:
        result = tools[name](**arguments) if isinstance(arguments, dict) else tools[name](arguments)
    except ToolTimeout as error:
        return f"error: {error}", "timeout"
    except (Exception, SystemExit) as error:  # the tool's own bug, bad arguments from the model: shown to the model
        return f"error: {type(error).__name__}: {error}", "error"
    return str(result), None


class ToolRunner:
    """Tool calls on daemon threads: at most `max_concurrent` at once, each given `timeout_s` from its start."""

    def __init__(self, max_concurrent: int, timeout_s: float):
        self.timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(max_concurrent)

    def submit(self, function, *args) -> Future:
        """A future of `function(*args)`'s (observation, status); past the deadline, ("error: ...", "timeout")."""
        future: Future = Future()
        threading.Thread(target=self._supervise, args=(future, function, args), daemon=True,
                         name="tool-call").start()
        return future

    def _supervise(self, future: Future, function, args) -> None:
        with self._slots:
            outcome: list = []
            worker = threading.Thread(target=lambda: outcome.append(function(*args)), daemon=True, name="tool")
            worker.start()
            worker.join(self.timeout_s)
        # A hung call gives its slot back: the thread runs on, but no longer counts against the concurrency.
        if outcome:
            future.set_result(outcome[0])
        elif worker.is_alive():
            future.set_result((f"error: the tool did not return within {self.timeout_s:g} s", "timeout"))
        else:
            future.set_result(("error: the tool ended its thread without returning", "error"))
