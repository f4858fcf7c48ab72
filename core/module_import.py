"""Import the module half of a `module:name` setting: a dotted module, or a path to a .py file.

Tools, environments and tasksets are named this way in configs (`path/to/file.py:name` or `package.module:name`);
one loader keeps what a path means (relative to the working directory) the same for all of them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_module_or_file(module_name: str, alias_prefix: str) -> ModuleType:
    """`module_name` imported; a `.py` path is loaded as `<alias_prefix><file stem>` and registered in
    sys.modules (dataclasses and pickling look their module up there). FileNotFoundError for a path that
    is not a file; ImportError as importing raises it."""
    if not module_name.endswith(".py"):
        return importlib.import_module(module_name)
    path = Path(module_name)
    if not path.is_file():
        raise FileNotFoundError(f"no file {path.resolve()}")
    module_spec = importlib.util.spec_from_file_location(f"{alias_prefix}{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    return module
