"""`recipezoo` command line: train (more subcommands arrive with their issues)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

from core.config import ConfigError, load_config


def load_trainer_class(spec: str):
    """`package.module.Class` or `path/to/file.py:Class` (a recipe that lives outside the package)."""
    if ":" in spec:
        file_name, class_name = spec.rsplit(":", 1)
        path = Path(file_name)
        if not path.is_file():
            raise ConfigError(f"trainer.cls={spec!r}: file {path} does not exist")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)
        # Registered before it runs, as `import` does: @dataclass and pickle look a class's module up there.
        sys.modules[module_spec.name] = module
        module_spec.loader.exec_module(module)
    else:
        module_name, _, class_name = spec.rpartition(".")
        if not module_name:
            raise ConfigError(f"trainer.cls={spec!r}: expected package.module.Class or path/to/file.py:Class")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            # Only the spec's own module (or a parent) missing is a config typo; a missing dependency
            # inside an existing module is a real ImportError and propagates.
            if not (module_name + ".").startswith(f"{error.name}."):
                raise
            raise ConfigError(
                f"trainer.cls={spec!r}: no module {error.name!r}; use package.module.Class or path/to/file.py:Class"
            ) from None
    if not hasattr(module, class_name):
        defined = sorted(k for k, v in vars(module).items() if isinstance(v, type) and v.__module__ == module.__name__)
        where = module.__file__ if ":" in spec else module.__name__
        raise ConfigError(f"trainer.cls={spec!r}: {where} has no class {class_name!r}; it defines {defined}")
    return getattr(module, class_name)


def train(args: argparse.Namespace) -> int:
    config = load_config(args.recipe, args.overrides)
    trainer_cls = load_trainer_class(config.trainer.cls)
    trainer = trainer_cls(config)
    trainer.fit()
    if trainer.world.is_main and len(trainer.val_history) >= 2:
        print(improvement_summary(trainer.val_history), flush=True)
    return 0


def improvement_summary(val_history: list[tuple[int, dict[str, float]]]) -> str:
    """One line per validation metric: before training -> after, and the change in points."""
    (first_step, first), (last_step, last) = val_history[0], val_history[-1]
    lines = [f"held-out results, step {first_step} -> step {last_step}:"]
    for key in sorted(k for k in last if k.endswith("/acc")):
        lines.append(f"  {key}: {first[key]:.3f} -> {last[key]:.3f} ({100 * (last[key] - first[key]):+.1f} points)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recipezoo", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser("train", help="run an RL recipe")
    train_parser.add_argument("--recipe", default="grpo", help="recipe name (recipes/<name>) or a config .yaml path")
    train_parser.add_argument("overrides", nargs="*", help="config overrides, e.g. actor.lr=1e-5")
    train_parser.set_defaults(handler=train)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as error:
        print(f"recipezoo: config error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
