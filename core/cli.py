"""`recipezoo` command line: train, sft, rm, data, generate, eval, preference-pairs, merge, leaderboard, doctor,
fetch-model."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path

from core.config import ConfigError, load_config
from core.trainer.stops import Interrupted, RunHalted

DEBUG_HINT = "rerun with --debug (or RECIPEZOO_DEBUG=1) for the traceback"
QUIET_RANK_WAIT_S = 10  # how long a rank other than 0 leaves rank 0 to report an error first


def _user_input_errors() -> tuple[type[Exception], ...]:
    """What bad input raises: the message names the file or key to fix, so a traceback would bury it."""
    from core.data.rows import DataError
    from core.reward.custom import CustomFunctionError
    from core.trainer.checkpoint import CheckpointError
    from core.trainer.run_dir import RunDirError

    return ConfigError, FileNotFoundError, DataError, CheckpointError, CustomFunctionError, RunDirError


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
    if args.command == "sft":
        from core.trainer.sft import SFTTrainer

        if not issubclass(trainer_cls, SFTTrainer):
            raise ConfigError(f"recipezoo sft: trainer.cls={config.trainer.cls} is not a supervised trainer — expected "
                              "core.trainer.sft.SFTTrainer or a subclass (--recipe sft); RL recipes run with "
                              "`recipezoo train`")
    if args.dry_run or config.trainer.dry_run:
        return dry_run(args, config, trainer_cls)
    if args.plan_json:
        raise ConfigError("--plan-json writes a dry run's plan: add --dry-run")
    from core.reward.build import custom_function
    from core.trainer.config_checks import check_trainer_class
    from core.trainer.preflight import preflight
    from core.trainer.run_dir import claimed_run_dirs
    from core.trainer.signals import interruptible

    # Everything the user can get wrong fails here, before an MLflow run, an output dir or a model exists.
    trainer_cls.check_config(config)  # the RL loop's checks, or a supervised trainer's own
    check_trainer_class(trainer_cls, config)
    custom_function(config.reward.custom_function)  # a reward file that fails to import
    # SGLang, devices, data files and model dir, before a model is built, warmed up or downloaded
    preflight(config, trainer_cls.check_data_file)
    # SIGTERM/SIGINT end in one line and a released lock from here on; the loop itself stops gracefully.
    with interruptible():
        if _rank() != 0:  # rank 0 owns the output dir and writes the checkpoints
            return _fit(trainer_cls, config)
        with claimed_run_dirs(config.trainer.output_dir, config.trainer.checkpoint_dir, config.trainer.save_freq > 0):
            return _fit(trainer_cls, config)


def dry_run(args: argparse.Namespace, config, trainer_cls) -> int:
    """Check the config, print the plan, train nothing. A trainer with a plan of its own (SFT) prints that."""
    from core.trainer.config_checks import check_trainer_class
    from core.trainer.plan import format_plan, make_plan

    if hasattr(trainer_cls, "dry_run_plan"):
        if args.plan_json:
            raise ConfigError(f"--plan-json: trainer.cls={config.trainer.cls} has no RL plan to write; drop it")
        print(trainer_cls.dry_run_plan(config), flush=True)
        return 0
    plan = make_plan(config)  # validates at the world the config asks for
    check_trainer_class(trainer_cls, config)
    print(format_plan(plan), flush=True)
    if args.plan_json:
        write_plan_json(args.plan_json, plan, config)
    return 0


def write_plan_json(path: str, plan: dict, config) -> None:
    """The plan and the resolved config as JSON, for tools that read a dry run (bench/scale/plan.py)."""
    import json

    from omegaconf import OmegaConf

    resolved = OmegaConf.to_container(config, resolve=True)
    Path(path).write_text(json.dumps({"plan": plan, "config": resolved}, indent=1) + "\n")


def _fit(trainer_cls, config) -> int:
    trainer = trainer_cls(config)
    trainer.fit()
    if trainer.world.is_main and len(trainer.val_history) >= 2:
        print(improvement_summary(trainer.val_history), flush=True)
    return 0


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))  # set by torchrun; absent in a single process


def improvement_summary(val_history: list[tuple[int, dict[str, float]]]) -> str:
    """One line per validation metric: before training -> after, and the change in points."""
    (first_step, first), (last_step, last) = val_history[0], val_history[-1]
    lines = [f"held-out results, step {first_step} -> step {last_step}:"]
    for key in sorted(k for k in last if k.endswith("/acc")):
        lines.append(f"  {key}: {first[key]:.3f} -> {last[key]:.3f} ({100 * (last[key] - first[key]):+.1f} points)")
    for key in sorted(k for k in last if k.endswith("_loss") and k in first):  # a supervised run's held-out loss
        lines.append(f"  {key}: {first[key]:.4f} -> {last[key]:.4f} ({last[key] - first[key]:+.4f})")
    return "\n".join(lines)


def leaderboard(args: argparse.Namespace) -> int:
    """MLflow (or a committed export) -> <out>/leaderboard.{md,csv,json} and curves_*.png."""
    from core.leaderboard.board import write_leaderboard
    from core.leaderboard.export import (
        LeaderboardError,
        add_runs,
        export_stores,
        load_export,
        merge_exports,
        save_export,
    )

    try:
        if args.from_export:
            export = merge_exports([load_export(path) for path in args.from_export])
            export_path = " ".join(args.from_export)
        else:
            from core.tracking.mlflow_tracker import normalize_tracking_uri

            uris = [normalize_tracking_uri(uri) for uri in args.uri]
            export, export_path = export_stores(uris, args.experiment), args.export
            if args.add_to_export:  # new runs join the committed ones, whose MLflow store may be long gone
                export = add_runs(load_export(args.export), export)
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
    debug_help = "on an error, print the full traceback instead of one line (= RECIPEZOO_DEBUG=1)"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    commands = parser.add_subparsers(dest="command", required=True)
    for command, what, recipe in (("train", "run an RL recipe", "grpo"),
                                  ("sft", "supervised fine-tuning (recipes/sft): the stage before RL", "sft")):
        train_parser = commands.add_parser(command, help=what)
        # SUPPRESS: without it the subcommand's default False would overwrite `recipezoo --debug train`.
        train_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
        train_parser.add_argument("--recipe", default=recipe, help="recipe name (recipes/<name>) or a config .yaml path")
        train_parser.add_argument("--dry-run", action="store_true", help="check the config and data, print the plan, "
                                  "train nothing (= trainer.dry_run=true)")
        train_parser.add_argument("--plan-json", metavar="FILE",
                                  help="with --dry-run: also write the plan and the resolved config to FILE as JSON")
        train_parser.add_argument("overrides", nargs="*", help="config overrides, e.g. actor.lr=1e-5")
        train_parser.set_defaults(handler=train)
    _add_leaderboard_parser(commands)
    for add_parser in _subcommand_parsers():
        add_parser(commands)
    return parser


def leaderboard_driver(args: argparse.Namespace) -> int:
    """`run` and `merge`: the driver in a checkout's bench/leaderboard/, which sits above this package (its jobs run
    `recipezoo train` and eval), so it is started as its own process, from the repository root, and never imported."""
    repo = Path(__file__).resolve().parents[1]
    if not (repo / "bench" / "leaderboard" / "driver.py").is_file():
        return _report(f"leaderboard {args.leaderboard_command} needs a source checkout (bench/leaderboard/ beside "
                       f"core/), not found under {repo}", code=2)
    # A file store (no SQLAlchemy needed); vLLM's own sampler, as in the other GPU suites (no FlashInfer JIT).
    env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
           "VLLM_USE_FLASHINFER_SAMPLER": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    argv = (["--merge"] if args.leaderboard_command == "merge" else []) + args.driver_args
    module = "bench.leaderboard.sft_first" if args.leaderboard_command == "sft-first" else "bench.leaderboard.driver"
    os.chdir(repo)
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)


def _add_leaderboard_parser(commands) -> None:
    board = commands.add_parser("leaderboard", help="run the leaderboard's jobs, merge them into results/, build its "
                                                    "tables and plots")
    actions = board.add_subparsers(dest="leaderboard_command", required=True)
    # prefix_chars="+": every flag, --help and `--` included, goes on to the driver, which parses them.
    for name, what in (("run", "train and evaluate every recipe x seed of a suite on this machine's GPUs "
                                "(`recipezoo leaderboard run --help`)"),
                       ("merge", "merge `run --out` dirs into the committed results/ (DIR [DIR ...] [--results DIR] "
                                 "[--timing-only DIR ...] [--before-from RUNS_JSON])"),
                       ("sft-first", "SFT the model on GSM8K's worked solutions, then `run` every recipe x seed from "
                                     "both the pretrained and the SFT weights (bench/leaderboard/sft_first.py)")):
        driver = actions.add_parser(name, help=what, add_help=False, prefix_chars="+")
        driver.add_argument("driver_args", nargs=argparse.REMAINDER)
        driver.set_defaults(handler=leaderboard_driver)
    report = actions.add_parser("report", help="build a leaderboard.md and plots from MLflow runs or exports "
                                "(default: the tiny-task table, results/leaderboard/gsm8k_smollm2/)")
    report.add_argument("--uri", nargs="+", default=[None],
                        help="MLflow tracking URI(s), merged into one table (default: sqlite:///<cwd>/mlflow.db)")
    report.add_argument("--experiment", default="recipezoo", help="MLflow experiment (tracking.experiment)")
    report.add_argument("--from-export", metavar="PATH", nargs="+",
                        help="rebuild from run export(s), without MLflow; several are merged into one leaderboard "
                             "(e.g. results/leaderboard/gsm8k_smollm2/tiny_runs.json "
                             "results/leaderboard/gsm8k_smollm2/runs.json)")
    report.add_argument("--export", metavar="PATH", default="results/leaderboard/gsm8k_smollm2/tiny_runs.json",
                        help="where to write the run export when reading MLflow")
    report.add_argument("--add-to-export", action="store_true",
                        help="add the MLflow runs to the existing --export file instead of replacing it "
                             "(e.g. new recipes' runs to results/leaderboard/gsm8k_smollm2/tiny_runs.json)")
    report.add_argument("--out", metavar="DIR", default="results/leaderboard/gsm8k_smollm2", help="output directory")
    report.set_defaults(handler=leaderboard)
    from core.leaderboard.compare import add_parser as add_compare_parser

    add_compare_parser(actions)


def _subcommand_parsers():
    """Commands that live next to what they drive; imported lazily inside their handlers."""
    from core.data.preprocess import add_parser as data
    from core.doctor import add_parser as doctor
    from core.eval.commands import add_parser as generate_and_eval
    from core.eval.commands import add_preference_pairs_parser as preference_pairs
    from core.models.fetch import add_parser as fetch_model
    from core.trainer.merge_command import add_parser as merge
    from core.trainer.reward_model_command import add_parser as reward_model

    return [data, generate_and_eval, preference_pairs, reward_model, merge, fetch_model, doctor]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse leaves overrides that follow a flag (`train a=1 --dry-run b=2`) unparsed: they are overrides too.
    if extra and (args.command not in ("train", "sft", "doctor") or any(arg.startswith("-") for arg in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides += extra
    if args.debug or os.environ.get("RECIPEZOO_DEBUG", "") not in ("", "0"):
        return args.handler(args)
    try:
        return args.handler(args)
    except Interrupted as stop:  # SIGTERM/SIGINT: rank 0 says where the run can continue from
        if _rank() == 0:
            print(f"recipezoo: {stop}", file=sys.stderr, flush=True)
        return stop.exit_code
    except KeyboardInterrupt:  # Ctrl-C outside a training run
        return _report("interrupted", code=130)
    except RunHalted as halt:
        return _report(str(halt), code=halt.exit_code)
    except _user_input_errors() as error:
        what = "config error: " if isinstance(error, ConfigError) else ""
        return _report(f"{what}{_one_line(error)}", code=2)
    except Exception as error:  # noqa: BLE001 - a bug or an environment problem: one line, the traceback on request
        return _report(f"{type(error).__name__}: {_one_line(error)} — {DEBUG_HINT}", code=1)


def _report(message: str, code: int) -> int:
    """Print one line. Under torchrun every rank meets the same bad input: rank 0 reports it, and torchrun
    stops the other ranks while they wait here, so the user reads one line. An error of one other rank
    alone is still printed, once its wait is over."""
    rank = _rank()
    if rank != 0:
        time.sleep(QUIET_RANK_WAIT_S)
        message = f"rank {rank}: {message}"
    print(f"recipezoo: {message}", file=sys.stderr, flush=True)
    return code


def _one_line(error: BaseException) -> str:
    cause = getattr(error, "cause", None)  # a Ray task error carries the worker's exception
    error = cause if isinstance(cause, BaseException) else error
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines) if len(lines) <= 3 else lines[0]


if __name__ == "__main__":
    sys.exit(main())
