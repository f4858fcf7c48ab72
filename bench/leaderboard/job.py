"""One job of the GSM8K leaderboard, started by bench/leaderboard/driver.py: train one recipe with one seed,
then evaluate the final policy on the trainer's own rollout engine (after the last weight sync, so no
second engine starts); or, with --eval-only, evaluate the pretrained model on an engine built from the same
config.

    python -m bench.leaderboard.job --recipe grpo --name grpo --data-dir data --work DIR/work/grpo-seed0 \
        [--eval-only] [--finish-by UNIX_TIME] [--reserve-s 120] [--gpu-lock DIR/locks/gpu0] -- <overrides>

Responses are written by `core.eval.generate.generate_responses` and scored by `recipezoo eval` (called
in-process), so every figure is what `recipezoo eval --responses FILE` reports; the eval runs are tagged
eval_stage=before|after, eval_model, eval_recipe, eval_train_run. The training run is tagged
after_eval=pending until every evaluation is logged (then done), and stopped_by_budget when the time
budget ended it early. `--work/summary.json` tells the driver how the job went.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from bench.leaderboard.suites import SUITES
from core.cli import load_trainer_class
from core.cli import main as recipezoo
from core.config import load_config
from core.eval.generate import GenerationSpec, generate_responses
from core.leaderboard.export import (
    AFTER_EVAL_TAG,
    MODEL_SHA_TAG,
    SAMPLED_TOKENS_KEY,
    STOPPED_TAG,
    steady_seconds,
)
from core.tracking.tracker import Tracking


class StopTraining(Exception):
    """Raised after the last step the time budget allows; caught in this file, never seen by users."""


class GpuTurns:
    """Who may change this GPU's memory now: one process starting (exclusive) or any number stepping (shared).

    vLLM sizes its KV cache from the GPU's free memory while its engine starts; another process allocating or
    freeing memory meanwhile (a training step, an engine going to sleep) makes that start fail or mis-size
    (vllm-project/vllm#55827). So a start waits for the steps in flight, and steps wait for the start. A
    waiting start takes the gate first, so that runs stepping without pause cannot starve it.
    """

    def __init__(self, path: str | None):
        self.main = self.gate = None
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.main, self.gate = open(f"{path}.lock", "a+"), open(f"{path}.gate", "a+")  # noqa: SIM115
        self.shared = False

    @contextmanager
    def exclusive(self):
        if self.main is None:
            yield
            return
        self.leave()
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        fcntl.flock(self.main, fcntl.LOCK_EX)
        try:
            wait_for_steady_memory()
            yield
        finally:
            fcntl.flock(self.main, fcntl.LOCK_UN)
            fcntl.flock(self.gate, fcntl.LOCK_UN)

    @contextmanager
    def starting(self, kv_cache_sized: bool):
        """A job's start: exclusive, unless its engine is told its KV cache's size (kv_cache_sized): vLLM then
        skips the measurement of free memory that other processes disturb, and the start goes beside the steps."""
        if not kv_cache_sized:
            with self.exclusive():
                yield
            return
        self.enter_step()
        yield

    def enter_step(self) -> None:
        """Hold the shared turn for the next step, letting a waiting start go first."""
        if self.main is None:
            return
        self.leave()
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        fcntl.flock(self.gate, fcntl.LOCK_UN)
        fcntl.flock(self.main, fcntl.LOCK_SH)
        self.shared = True

    def leave(self) -> None:
        if self.shared:
            fcntl.flock(self.main, fcntl.LOCK_UN)
            self.shared = False


def wait_for_steady_memory(timeout_s: float = 30.0, tolerance: int = 32 << 20) -> None:
    """Until the GPU's free memory holds still: a process that just exited may still be handing its
    memory back when the lock it held is released."""
    import torch

    if not torch.cuda.is_available():
        return
    readings, deadline = [torch.cuda.mem_get_info()[0]], time.monotonic() + timeout_s
    while time.monotonic() < deadline and (len(readings) < 3 or max(readings[-3:]) - min(readings[-3:]) > tolerance):
        time.sleep(0.5)
        readings.append(torch.cuda.mem_get_info()[0])


def kv_cache_sized(config) -> bool:
    """Whether the job's vLLM engine gets its KV cache's size (kv_cache_memory_bytes) instead of measuring it."""
    return config.rollout.name == "vllm" and bool(config.rollout.engine_kwargs.get("kv_cache_memory_bytes"))


def budget_seconds(finish_by: float | None, reserve_s: float) -> float | None:
    """Seconds from now that training may take so that the evaluation still ends by `finish_by`."""
    return None if finish_by is None else finish_by - time.time() - reserve_s


class FinishOnStop(Tracking):
    """Leaving `fit` by StopTraining is a complete run: FINISHED, no `run FAILED` line."""

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, StopTraining):
            self.finish("FINISHED")
            return False
        return super().__exit__(exc_type, exc, tb)


def leaderboard_trainer(trainer_cls, turns: GpuTurns):
    """`trainer_cls` that takes GPU turns, counts every sampled token, and stops before a step would
    end past its `deadline` (time.monotonic(); None: never); the step it stops after is validated like
    a last step."""

    class LeaderboardTrainer(trainer_cls):
        deadline: float | None = None

        def __init__(self, config):
            super().__init__(config)
            self.tracking = FinishOnStop(self.tracking.backends)
            self.sampled_tokens, self.validating, self.step_seconds = 0, False, []
            generate = self.actor_rollout.generate

            def counted(prompts, params):  # ReMax's greedy baseline and DAPO's extra rounds count too
                batch = generate(prompts, params)
                if not self.validating:
                    self.sampled_tokens += int(batch["response_mask"].sum().item())
                return batch

            self.actor_rollout.generate = counted
            # Disaggregated, the final evaluation runs on the Ray rollout workers, which fit's exit would kill:
            # closed after the evaluation instead (train_and_evaluate).
            self.close_engines = lambda: None
            if config.trainer.get("placement") == "disaggregated":
                self.close_engines, self.actor_rollout.close = self.actor_rollout.close, lambda: None

        def generate(self, prompts, params=None):
            turns.enter_step()
            return super().generate(prompts, params)

        def validate(self, step):
            turns.enter_step()
            self.validating = True
            try:
                return super().validate(step)
            finally:
                self.validating = False

        def log_step(self, step, batch, metrics):
            super().log_step(step, batch, {**metrics, SAMPLED_TOKENS_KEY: self.sampled_tokens})
            self.sampled_tokens = 0
            total, step_s = self.config.trainer.total_steps, self.timings.get("timing_s/step", 0.0)
            self.step_seconds.append(step_s)
            if self.deadline is not None and step < total and time.monotonic() + step_s > self.deadline:
                self.validate(step)  # fit's own validation would come after this call: the curve ends here
                raise StopTraining(step)

    LeaderboardTrainer.__name__ = LeaderboardTrainer.__qualname__ = f"Leaderboard{trainer_cls.__name__}"
    return LeaderboardTrainer


def eval_specs(args, config, label: str) -> list[tuple[str, GenerationSpec, tuple[str, ...]]]:
    """(set name, generation settings, graders) for each evaluation set."""
    specs, files = [], dict(args.eval_file)
    for name, file, n, temperature, top_p, max_tokens, graders in SUITES[args.suite].eval_sets:
        specs.append((name, GenerationSpec(
            model=label, data=(str(Path(args.data_dir) / files.get(name, file)),), n=n, temperature=temperature, top_p=top_p,
            max_tokens=min(max_tokens, args.eval_max_tokens or max_tokens), max_samples=args.eval_limit,
            max_prompt_length=args.eval_prompt_length, batch_size=1_000_000, seed=config.trainer.seed,
            rollout=config.rollout.name, device=config.trainer.device), graders))
    return specs


def evaluate(args, config, rollout, tokenizer, *, label: str, tags: dict[str, str]) -> dict:
    """Generate every eval set with `rollout`, then `recipezoo eval` each file (an MLflow run per grader)."""
    work, figures = Path(args.work), {}
    for name, spec, graders in eval_specs(args, config, label):
        responses = generate_responses(spec, work / f"{tags['eval_stage']}_{name}.parquet", rollout=rollout,
                                       tokenizer=tokenizer, template_kwargs=prompt_template_kwargs(config))
        for grader in graders:
            out = work / f"{tags['eval_stage']}_{name}_{grader}.json"
            run_name = f"{args.job}-{tags['eval_stage']}-{name}" + (f"-{grader}" if len(graders) > 1 else "")
            argv = ["eval", "--responses", str(responses), "--gsm8k-method", grader,  # the run's own reward manager
                    "--reward-manager", config.reward.manager, "--timeout-s", str(config.reward.timeout_s),
                    "--experiment", config.tracking.experiment, "--seed", str(config.trainer.seed),
                    "--run-name", run_name, "--out", str(out), "--mlflow-uri", config.tracking.uri]
            for key, value in {**tags, **({MODEL_SHA_TAG: args.model_sha256} if args.model_sha256 else {})}.items():
                argv += ["--tag", f"{key}={value}"]
            if recipezoo(argv) != 0:
                raise RuntimeError(f"recipezoo {' '.join(argv)} failed")
            figures[f"{name}/{grader}"] = json.loads(out.read_text())["results"]
    return figures


def prompt_template_kwargs(config) -> dict:
    """What the training prompts' chat template got beside the messages: a multi-turn run's tool schemas
    (format=chat), so that its evaluation offers the tools as its training did."""
    from core.rollout.multi_turn.settings import enabled, template_kwargs, tool_spec

    return template_kwargs(config.rollout, tool_spec(config.rollout)) if enabled(config.rollout) else {}


def eval_file(text: str) -> tuple[str, str]:
    """`--eval-file SET=FILE` -> (SET, FILE)."""
    name, sep, file = text.partition("=")
    if not sep or not name or not file:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SET=FILE, e.g. tool_arithmetic=tool_arithmetic/test.parquet")
    return name, file


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", required=True, help="recipe name (recipes/<name>) or config .yaml")
    parser.add_argument("--name", required=True, help="the recipe's leaderboard name (its `recipe` tag)")
    parser.add_argument("--job", default=None, help="this job's name (run names, logs); default --name")
    parser.add_argument("--data-dir", required=True, help="gsm8k/test.parquet, math500/test.parquet, aime24/...")
    parser.add_argument("--work", required=True, help="this job's folder: responses, eval json, summary.json")
    parser.add_argument("--eval-only", action="store_true", help="evaluate the pretrained model, train nothing")
    parser.add_argument("--finish-by", type=float, default=None, metavar="UNIX_TIME",
                        help="the job must end by then: training stops early enough to evaluate")
    parser.add_argument("--reserve-s", type=float, default=120.0, help="seconds kept for the evaluation")
    parser.add_argument("--gpu-lock", default=None, help="path prefix of this GPU's turn locks (GpuTurns)")
    parser.add_argument("--eval-limit", type=int, default=None, help="first N prompts of each eval set")
    parser.add_argument("--eval-max-tokens", type=int, default=None, help="cap every eval set's new tokens")
    parser.add_argument("--eval-prompt-length", type=int, default=1024, help="longest eval prompt, in tokens")
    parser.add_argument("--suite", default="gsm8k", choices=sorted(SUITES), help="whose eval sets to evaluate")
    parser.add_argument("--model-sha256", default=None, help="tagged on every evaluation: the model file's identity")
    parser.add_argument("--eval-file", type=eval_file, action="append", default=[], metavar="SET=FILE",
                        help="evaluate the suite's eval set SET on FILE (under --data-dir) instead of its own file: "
                             "a tool run's prompts, which offer the tool")
    parser.add_argument("--eval-model", default=None, help="the evaluations' eval_model tag (default: model.path): "
                        "the pretrained model with its tool names another starting point than the model alone")
    args, overrides = parser.parse_known_args(argv)
    overrides = [o for o in overrides if o != "--"]
    if [o for o in overrides if o.startswith("-")]:
        parser.error(f"unrecognized arguments: {' '.join(o for o in overrides if o.startswith('-'))}")
    args.job = args.job or args.name
    return args, overrides


def tag_run(config, run_id: str, tags: dict[str, str]) -> None:
    import mlflow

    client = mlflow.MlflowClient(config.tracking.uri)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)


def write_summary(args, **fields) -> None:
    """What the driver reads: the training run, steps, timings; rewritten as the job goes."""
    path = Path(args.work) / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else {"job": args.job, "recipe": args.name}
    summary.update(fields)
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")


def train_and_evaluate(args, config, turns: GpuTurns) -> None:
    started = time.monotonic()
    trainer_cls = leaderboard_trainer(load_trainer_class(config.trainer.cls), turns)
    with turns.starting(kv_cache_sized(config)):  # model load, FSDP and the engine's start
        trainer = trainer_cls(config)
    run_id = trainer.tracking.run_id
    tag_run(config, run_id, {AFTER_EVAL_TAG: "pending"})
    write_summary(args, run_id=run_id, setup_s=round(time.monotonic() - started, 1), status="training")
    budget = budget_seconds(args.finish_by, args.reserve_s)
    trainer.deadline = None if budget is None else time.monotonic() + budget
    total, started = config.trainer.total_steps, time.monotonic()
    try:
        trainer.fit()
        steps, stopped = total, None
    except StopTraining as stop:
        steps, stopped = int(stop.args[0]), f"time: after step {stop.args[0]} of {total}"
        tag_run(config, run_id, {STOPPED_TAG: stopped})
    step_s = round(sum(trainer.step_seconds) / len(trainer.step_seconds), 2) if trainer.step_seconds else None
    write_summary(args, steps=steps, stopped=stopped, step_s=step_s, steady_step_s=steady_seconds(trainer.step_seconds),
                  train_s=round(time.monotonic() - started, 1),
                  status="eval")
    model = str(config.model.path)
    started = time.monotonic()
    try:
        figures = evaluate(args, config, final_engine(trainer), trainer.tokenizer,
                           label=f"{model} after {args.name} ({steps} steps, run {run_id})",
                           tags={"eval_stage": "after", "eval_model": args.eval_model or model,
                                 "eval_recipe": args.name, "eval_train_run": run_id})
    finally:
        trainer.close_engines()
    tag_run(config, run_id, {AFTER_EVAL_TAG: "done"})
    write_summary(args, eval_s=round(time.monotonic() - started, 1), figures=figures, status="done")


def final_engine(trainer):
    """What evaluates the final policy: the trainer's own engine, which holds it after the last weight sync. Under
    trainer.placement=disaggregated the engines are Ray rollout workers, and the worker group's `generate`
    splits the prompts over them as it does in training."""
    group = trainer.actor_rollout
    return group if trainer.config.trainer.get("placement") == "disaggregated" else group.rollout


def evaluate_pretrained(args, config, turns: GpuTurns) -> None:
    """The model before RL, on an engine built from the training config (same engine settings)."""
    import torch

    from core.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
    from core.rollout.build import build_rollout

    started, model = time.monotonic(), str(config.model.path)
    path = resolve_model_path(model)
    tokenizer = load_tokenizer(path, config.model.gguf_file, config.model.trust_remote_code)
    device = "cuda" if config.trainer.device == "auto" and torch.cuda.is_available() else config.trainer.device
    device = "cpu" if device == "auto" else device
    with turns.starting(kv_cache_sized(config)):
        rollout = build_rollout(config, path, tokenizer, lambda: load_causal_lm(
            path, config.model.gguf_file, config.model.trust_remote_code).to(device))
    write_summary(args, setup_s=round(time.monotonic() - started, 1), status="eval")
    turns.enter_step()
    started = time.monotonic()
    figures = evaluate(args, config, rollout, tokenizer, label=model,
                       tags={"eval_stage": "before", "eval_model": args.eval_model or model})
    write_summary(args, eval_s=round(time.monotonic() - started, 1), figures=figures, status="done")


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    # The training run's `recipe` tag is its row, as its evaluations' `eval_recipe` is: a LoRA row
    # (grpo-lora16) must not count as a seed of the full-weight recipe it trains (grpo).
    config = load_config(args.recipe, [*overrides, f"tracking.tags.recipe={args.name}"])
    disaggregated = config.trainer.get("placement") == "disaggregated" and not args.eval_only
    if (config.trainer.controller != "local" and not disaggregated) or not config.tracking.uri:
        raise SystemExit("job.py evaluates on the trainer's own engine and logs to one store: "
                         "trainer.controller=local (ray only with trainer.placement=disaggregated, whose rollout "
                         "workers evaluate) and tracking.uri are required")
    turns = GpuTurns(args.gpu_lock)
    (evaluate_pretrained if args.eval_only else train_and_evaluate)(args, config, turns)
    turns.leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
