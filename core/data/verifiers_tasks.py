"""Rows from a `verifiers` taskset (`pip install "recipezoo[verifiers]"`): `data.train_files=verifiers://module:Class`.

A verifiers (v1) `Taskset` yields typed `Task`s; each becomes one row of verl's schema: its system prompt and prompt as
the `prompt` messages, `data_source` `verifiers/<Class>`, no ground truth (the task's own `@reward`s score it, through
`rollout.multi_turn.env=verifiers:module:Class`), and the task's data as JSON in `extra_info.verifiers_task`, from
which the environment rebuilds the task. Both splits are the taskset's whole `load()`: a taskset with a held-out part
is two classes (or two `verifiers://` specs). A task whose prompt is empty (the user opens the conversation) is
refused: a multi-turn episode starts from the row's prompt.
"""

from __future__ import annotations

import json

from core.data.rows import DataError
from core.module_import import import_module_or_file

VERIFIERS_DATA_PREFIX = "verifiers://"
TASK_KEY = "verifiers_task"  # extra_info key holding the task's data (JSON)
INSTALL_HINT = 'pip install "recipezoo[verifiers]"'


def import_verifiers():
    try:
        import verifiers.v1 as vf
    except ImportError as error:
        raise DataError(f"the verifiers package is not installed ({error}); {INSTALL_HINT}") from None
    return vf


def load_taskset_class(spec: str, key: str, prefix: str = VERIFIERS_DATA_PREFIX):
    """`package.module:Class` or `path/to/file.py:Class`, a subclass of verifiers' `Taskset`; errors name
    `key=<prefix><spec>`, the setting as the user wrote it."""
    vf = import_verifiers()
    key = f"{key}={prefix + spec!r}"
    module_name, _, name = spec.rpartition(":")
    if not module_name or not name:
        raise DataError(f"{key}: expected package.module:TasksetClass or path/to/file.py:TasksetClass")
    try:
        module = import_module_or_file(module_name, "recipezoo_verifiers_")
    except FileNotFoundError as error:
        raise DataError(f"{key}: {error}") from None
    except ImportError as error:
        raise DataError(f"{key}: cannot import {module_name} ({error})") from None
    taskset_class = getattr(module, name, None)
    if not (isinstance(taskset_class, type) and issubclass(taskset_class, vf.Taskset)):
        raise DataError(f"{key}: {module_name}.{name} is not a verifiers Taskset subclass")
    return taskset_class


def new_taskset(taskset_class):
    """The taskset under its config class's defaults (a taskset's knobs are its config's fields)."""
    vf = import_verifiers()
    from verifiers.v1.utils.generic import concrete_type

    config_class = concrete_type(taskset_class, vf.TasksetConfig) or vf.TasksetConfig
    return taskset_class(config_class())


def prompt_messages(data) -> list[dict]:
    messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        return messages + [{"role": "user", "content": data.prompt}]
    return messages + [{"role": m.role, "content": m.content if isinstance(m.content, str) else data.prompt_text}
                       for m in data.prompt]


def taskset_rows(spec: str, key: str = "data.train_files") -> list[dict]:
    taskset_class = load_taskset_class(spec, key)
    taskset, shown = new_taskset(taskset_class), f"{key}={VERIFIERS_DATA_PREFIX}{spec}"
    if not taskset.bounded:
        raise DataError(f"{shown}: the taskset is infinite; bound it (a class whose load() ends)")
    rows = []
    for task in taskset:
        if not task.data.prompt:
            raise DataError(f"{shown}: task {task.data.idx} has no prompt; a multi-turn episode starts from "
                            f"its prompt")
        rows.append({
            "data_source": f"verifiers/{taskset_class.__name__}",
            "prompt": prompt_messages(task.data),
            "ability": "verifiers",
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"index": task.data.idx, TASK_KEY: json.dumps(task.data.model_dump(mode="json"))},
        })
    if not rows:
        raise DataError(f"{shown}: the taskset yields no task")
    return rows
