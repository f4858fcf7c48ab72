"""User reward functions loaded from a python file (`reward.custom_function.path` / `.name`).

The function has verl's signature, so verl reward files work unchanged:
    fn(data_source, solution_str, ground_truth, extra_info=None) -> float | {"score": ..., "acc": ...}
When configured it scores every data source, as in verl.

`CustomFunction(path, name)` is what the reward managers hold: it pickles as two strings, so a
pool worker receives the (path, name) and loads the file itself (a function defined in a file
loaded by path cannot be pickled by reference).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PATH_KEY, NAME_KEY = "reward.custom_function.path", "reward.custom_function.name"


class CustomFunctionError(ValueError):
    """The configured custom reward function cannot be loaded; the message says what to fix."""


@dataclass(frozen=True)
class CustomFunction:
    """A custom reward function by file and name, loaded on first call in each process."""

    path: str
    name: str

    def __call__(self, data_source, solution_str, ground_truth, extra_info=None):
        return load_custom_function(self.path, self.name)(data_source, solution_str, ground_truth,
                                                          extra_info=extra_info)


_LOADED: dict[tuple[str, str], Callable] = {}  # (resolved path, name) -> function, per process


def load_custom_function(path: str, name: str) -> Callable:
    """The function `name` defined in the python file `path` (loaded once per process)."""
    file = Path(path).expanduser().resolve()
    if (str(file), name) in _LOADED:
        return _LOADED[(str(file), name)]
    if not file.is_file():
        raise CustomFunctionError(
            f"{PATH_KEY}={path}: no such file (resolved to {file}) — set it to an existing .py file "
            f"that defines {name}(data_source, solution_str, ground_truth, extra_info=None)"
        )
    module = _import_file(file)
    if not hasattr(module, name):
        defined = _functions_defined_in(module)
        listing = f"it defines {', '.join(defined)}" if defined else "it defines no functions"
        raise CustomFunctionError(
            f"{NAME_KEY}={name!r}: {file} has no {name!r}; {listing}. Set {NAME_KEY} to the scoring function's name"
        )
    function = getattr(module, name)
    if not callable(function):
        raise CustomFunctionError(
            f"{NAME_KEY}={name!r}: in {file} {name!r} is of type {type(function).__name__}, not a function; "
            f"point {NAME_KEY} at the scoring function"
        )
    _LOADED[(str(file), name)] = function
    return function


def _import_file(file: Path):
    # A stable, unique module name per file: objects the file defines stay picklable by reference
    # in this process, and two files with the same stem do not replace each other.
    module_name = "recipezoo_custom_reward_" + re.sub(r"\W", "_", str(file))
    if module_name in sys.modules:  # another function of the same file: run the file once
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None:
        raise CustomFunctionError(f"{PATH_KEY}={file}: not a python file — point it at a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before running it: dataclasses in the file look it up
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        del sys.modules[module_name]
        raise CustomFunctionError(
            f"{PATH_KEY}={file}: syntax error at line {error.lineno}: {error.msg} — fix the file "
            f"(or point {PATH_KEY} at another one)"
        ) from error
    except Exception as error:
        del sys.modules[module_name]
        raise CustomFunctionError(
            f"{PATH_KEY}={file}: importing the file raised {type(error).__name__}: {error} — fix the "
            f"file or install what it imports"
        ) from error
    return module


def _functions_defined_in(module) -> list[str]:
    return sorted(
        name for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
    )
