"""`recipezoo` command line: train, data, generate, eval, merge, leaderboard, doctor, fetch-model."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

from core.config import ConfigError, load_config


def _user_input_errors() -> tuple[type[Exception], ...]:
    from core.reward.custom import CustomFunctionError
    from core.trainer.checkpoint import CheckpointError

    return FileNotFoundError, CheckpointError, CustomFunctionError


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
    if args.dry_run or config.trainer.dry_run:
        from core.trainer.plan import format_plan, make_plan

        print(format_plan(make_plan(config)), flush=True)
        return 0
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


def leaderboard(args: argparse.Namespace) -> int:
    """MLflow (or a committed export) -> results/leaderboard.{md,csv,json} and curves_*.png."""
    from core.tracking.leaderboard import write_leaderboard
    from core.tracking.run_export import LeaderboardError, export_stores, load_export, merge_exports, save_export

    try:
        if args.from_export:
            export = merge_exports([load_export(path) for path in args.from_export])
            export_path = " ".join(args.from_export)
        else:
            from core.tracking.mlflow_tracker import normalize_tracking_uri

            uris = [normalize_tracking_uri(uri) for uri in args.uri]
            export, export_path = export_stores(uris, args.experiment), args.export
        written = write_leaderboard(export, args.out, export_path=export_path)  # checks before writing
    except LeaderboardError as error:
        print(f"recipezoo leaderboard: {error}", file=sys.stderr)
        return 1
    if not args.from_export:
        written.insert(0, save_export(export, args.export))  # only a valid export replaces the committed one
    print("wrote " + ", ".join(str(path) for path in written), flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recipezoo", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser("train", help="run an RL recipe")
    train_parser.add_argument("--recipe", default="grpo", help="recipe name (recipes/<name>) or a config .yaml path")
    train_parser.add_argument("--dry-run", action="store_true",
                              help="check the config and data, print the plan, train nothing (= trainer.dry_run=true)")
    train_parser.add_argument("overrides", nargs="*", help="config overrides, e.g. actor.lr=1e-5")
    train_parser.set_defaults(handler=train)
    board = commands.add_parser("leaderboard", help="build results/leaderboard.md and plots from MLflow runs")
    board.add_argument("--uri", nargs="+", default=[None],
                       help="MLflow tracking URI(s), merged into one table (default: sqlite:///<cwd>/mlflow.db)")
    board.add_argument("--experiment", default="recipezoo", help="MLflow experiment (tracking.experiment)")
    board.add_argument("--from-export", metavar="PATH", nargs="+",
                       help="rebuild from run export(s), without MLflow; several are merged into one leaderboard "
                            "(e.g. results/runs.json results/smollm2_gsm8k_gpu/runs.json)")
    board.add_argument("--export", metavar="PATH", default="results/runs.json",
                       help="where to write the run export when reading MLflow")
    board.add_argument("--out", metavar="DIR", default="results", help="output directory")
    board.set_defaults(handler=leaderboard)
    for add_parser in _subcommand_parsers():
        add_parser(commands)
    return parser


def _subcommand_parsers():
    """Commands that live next to what they drive; imported lazily inside their handlers."""
    from core.data.preprocess import add_parser as data
    from core.doctor import add_parser as doctor
    from core.eval.commands import add_parser as generate_and_eval
    from core.models.export import add_parser as merge
    from core.models.fetch import add_parser as fetch_model

    return [data, generate_and_eval, merge, fetch_model, doctor]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse leaves overrides that follow a flag (`train a=1 --dry-run b=2`) unparsed: they are overrides too.
    if extra and (args.command not in ("train", "doctor") or any(arg.startswith("-") for arg in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides += extra
    try:
        return args.handler(args)
    except ConfigError as error:
        print(f"recipezoo: config error: {error}", file=sys.stderr)
        return 2
    except _user_input_errors() as error:  # the message names the file or key to fix; a traceback would bury it
        print(f"recipezoo: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
