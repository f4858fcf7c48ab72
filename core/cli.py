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
        module_spec.loader.exec_module(module)
    else:
        module_name, _, class_name = spec.rpartition(".")
        module = importlib.import_module(module_name)
    if not hasattr(module, class_name):
        raise ConfigError(f"trainer.cls={spec!r}: {module.__name__} has no class {class_name!r}")
    return getattr(module, class_name)


def train(args: argparse.Namespace) -> int:
    config = load_config(args.recipe, args.overrides)
    trainer_cls = load_trainer_class(config.trainer.cls)
    trainer = trainer_cls(config)
    metrics = trainer.fit()
    if metrics and trainer.world.is_main:
        print("final validation: " + ", ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())), flush=True)
    return 0


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
