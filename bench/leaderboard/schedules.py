"""The leaderboard driver's schedules (`recipezoo leaderboard run --schedule ...`): the flags, the schedules each
recipe × seed trains under, their config keys, and the up-front refusal of a combination that cannot run.

Rows are named `<recipe>-<schedule>[...]` beside the plain sync row (core/leaderboard/schedules.py names them), so a
table compares schedules of one recipe at the same budget: issue 38's "learning at equal cost".
"""

from __future__ import annotations

from bench.leaderboard.tiny_baselines import VARIANTS
from core.algos.rollout_correction import NO_CORRECTION, ROLLOUT_CORRECTIONS
from core.config import ConfigError, load_config
from core.leaderboard.recipe_readmes import lora_row
from core.leaderboard.schedules import SYNC, RunSchedule
from core.trainer.schedule import SCHEDULES

SCHEDULE_NAMES = tuple(SCHEDULES)  # sync, one_step_off, async
CORRECTIONS = (NO_CORRECTION, *ROLLOUT_CORRECTIONS.names())


def add_schedule_args(parser) -> None:
    """The flags of the schedules each recipe × seed trains under, as one group of the driver's parser."""
    schedules = parser.add_argument_group("schedules (trainer.schedule; core/trainer/schedule.py)")
    schedules.add_argument("--schedule", nargs="+", default=[SYNC], choices=list(SCHEDULE_NAMES),
                           help="train every recipe × seed under each; rows <recipe>-<schedule>, sync's plain <recipe>")
    schedules.add_argument("--rollout-correction", nargs="+", default=[NO_CORRECTION], choices=list(CORRECTIONS),
                           help="off-policy rows with each algorithm.rollout_correction.mode (sync rows: none)")
    schedules.add_argument("--max-staleness", type=int, default=None, help="async rows: trainer.max_staleness")
    schedules.add_argument("--partial-rollout", action="store_true", help="async rows: trainer.partial_rollout=true")
    schedules.add_argument("--placement", default="colocated", choices=["colocated", "disaggregated"],
                           help="off-policy rows: disaggregated puts the engines on GPUs of their own under Ray "
                           "(sync rows stay colocated on one GPU: the baseline)")
    schedules.add_argument("--gpus-per-job", type=int, default=1, help="a disaggregated job's GPUs, rollout + training")
    schedules.add_argument("--rollout-gpus", type=int, default=1, help="of a disaggregated job's GPUs, how many "
                           "generate (trainer.rollout_workers); the rest train (trainer.n_gpus_per_node)")


def check_placement_flags(args, parser) -> None:
    """What the flags alone tell: a split that leaves no GPU to train on, or flags no job would read."""
    if args.placement == "disaggregated" and not 1 <= args.rollout_gpus < args.gpus_per_job:
        parser.error(f"--placement disaggregated with --gpus-per-job {args.gpus_per_job} --rollout-gpus "
                     f"{args.rollout_gpus}: a job needs at least one rollout GPU and one training GPU, e.g. "
                     "--gpus-per-job 2 --rollout-gpus 1")
    if args.placement == "colocated" and args.gpus_per_job != 1:
        parser.error(f"--gpus-per-job {args.gpus_per_job} with --placement colocated: a colocated job runs on one GPU "
                     "(trainer.controller=local); pass --placement disaggregated to give jobs several")
    off_policy = [schedule for schedule in args.schedule if schedule != SYNC]
    if not off_policy and (args.rollout_correction != [NO_CORRECTION] or args.placement != "colocated"):
        parser.error("--rollout-correction and --placement apply to off-policy rows: add --schedule one_step_off or "
                     "async (sync rows are the plain recipe, the baseline)")
    if "async" not in args.schedule and (args.max_staleness is not None or args.partial_rollout):
        parser.error("--max-staleness and --partial-rollout apply to async rows: add --schedule async")


def run_schedules(args) -> list[RunSchedule]:
    """The schedules each recipe × seed trains under: sync plain, each off-policy one with each correction."""
    found = []
    for name in args.schedule:
        for correction in ([NO_CORRECTION] if name == SYNC else args.rollout_correction):
            disaggregated = name != SYNC and args.placement == "disaggregated"
            found.append(RunSchedule(name, correction, args.max_staleness if name == "async" else None,
                                     args.partial_rollout and name == "async",
                                     args.rollout_gpus if disaggregated else 0,
                                     args.gpus_per_job - args.rollout_gpus if disaggregated else 1))
    return list(dict.fromkeys(found))


def schedule_overrides(schedule: RunSchedule) -> list[str]:
    """The config keys of `schedule` (none for plain sync, so its jobs are the recipe's ordinary runs)."""
    overrides = [] if schedule.schedule == SYNC else [f"trainer.schedule={schedule.schedule}"]
    overrides += [] if schedule.correction == NO_CORRECTION else [f"algorithm.rollout_correction.mode={schedule.correction}"]
    overrides += [f"trainer.max_staleness={schedule.max_staleness}"] if schedule.max_staleness is not None else []
    overrides += ["trainer.partial_rollout=true"] if schedule.partial_rollout else []
    if schedule.rollout_gpus:
        overrides += ["trainer.controller=ray", "trainer.placement=disaggregated",
                      f"trainer.rollout_workers={schedule.rollout_gpus}",
                      f"trainer.n_gpus_per_node={schedule.training_gpus}"]
    return overrides


def check_schedules(args, variants: list[str], gpu_count: int, variant_overrides) -> None:
    """Refuse the whole invocation before any job starts when a recipe cannot run under a schedule (the config
    check's own reasons: ReMax, DAPO's dynamic sampling, a loss the correction does not weigh), or when a job
    needs more GPUs than given. `variant_overrides(variant, args)`: what a recipe needs beyond the budget."""
    from core.trainer.config_checks import validate_config

    schedules = run_schedules(args)
    most = max(schedule.gpus for schedule in schedules)
    if most > 1 and most > gpu_count:  # one-GPU jobs also run on CPU (--gpus cpu)
        raise SystemExit(f"--gpus-per-job {most}: a job needs {most} GPUs and --gpus {args.gpus} gives "
                         f"{gpu_count if gpu_count else 'none (CPU)'}; lower --gpus-per-job or give more GPUs")
    for variant in dict.fromkeys(variants):
        for schedule in schedules:
            budget = [f"data.train_batch_size={args.prompts}", f"rollout.n={args.n}",
                      f"actor.ppo_mini_batch_size={args.mini_batch}", f"data.max_response_length={args.max_response}"]
            overrides = budget + variant_overrides(variant, args) + schedule_overrides(schedule)
            overrides += [f"actor.lora.rank={args.lora_rank}"] if args.lora_rank else []
            overrides += args.overrides
            split = f"--gpus-per-job {schedule.gpus} --rollout-gpus {schedule.rollout_gpus}"
            try:  # every check a launch makes, at the job's own training ranks
                validate_config(load_config(VARIANTS[variant], overrides), (schedule.training_gpus, split))
            except ConfigError as error:
                raise SystemExit(f"--schedule {schedule.schedule} (row {lora_row(variant, args.lora_rank)}"
                                 f"{schedule.suffix()}) cannot run, so no job starts: {error}") from None
