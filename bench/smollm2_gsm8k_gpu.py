"""One recipe of the SmolLM2-135M-Instruct GSM8K benchmark, in one process on one vLLM engine (the trainer's).

    python3 bench/smollm2_gsm8k_gpu.py --recipe grpo --work DIR --gsm8k test.parquet --aime aime24.parquet \
        [--eval-before] [--train-budget-s 120] -- <config overrides>

1. With --eval-before: the pretrained model on GSM8K test (greedy) and AIME24 (n samples each), as MLflow
   eval runs tagged eval_stage=before.
2. The recipe trains (`recipezoo train --recipe RECIPE <overrides>`) for trainer.total_steps steps, or
   until its training budget is spent: --train-budget-s seconds of `fit`, cut so that the process can
   still evaluate (--reserve-s) before --finish-by (a Unix time). It then stops after the step that
   crossed the budget (the run stays FINISHED, tagged `stopped_by_budget`).
3. The trained policy, which the engine holds after the last weight sync, evaluated the same way:
   eval runs tagged eval_stage=after, eval_recipe, eval_train_run=<training run id>.

Responses are written by `core.eval.generate.generate_responses` and scored by `recipezoo eval` (called
in-process), so every figure is what `recipezoo eval --responses FILE` reports. `DIR/<recipe>.json`
summarises the run (steps, timings, figures) for bench/smollm2_gsm8k_report.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.cli import load_trainer_class  # noqa: E402
from core.cli import main as recipezoo  # noqa: E402
from core.config import load_config  # noqa: E402
from core.eval.generate import GenerationSpec, generate_responses  # noqa: E402


class StopTraining(Exception):
    """Raised after the step that crossed the training budget; caught here, never seen by users."""


def training_budget(budget_s: float, finish_by: float | None, reserve_s: float) -> float:
    """Seconds `fit` may take: `budget_s` (0 = unlimited), cut to end `reserve_s` before `finish_by`; at
    least one step runs (a budget of ~0 stops after step 1)."""
    if finish_by is None:
        return budget_s
    left = finish_by - time.time() - reserve_s
    return max(min(budget_s, left) if budget_s > 0 else left, 1e-9)


def with_budget(trainer_cls, budget_s: float, finish_by: float | None = None, reserve_s: float = 0.0):
    """`trainer_cls` that stops after the first step ending more than its budget into `fit`."""

    class Budgeted(trainer_cls):
        deadline: float | None = None
        budget: float = 0.0

        def fit(self):
            self.budget = training_budget(budget_s, finish_by, reserve_s)
            self.deadline = time.monotonic() + self.budget if self.budget > 0 else None
            return super().fit()

        def log_step(self, step, batch, metrics):
            super().log_step(step, batch, metrics)
            if self.deadline is not None and time.monotonic() > self.deadline \
                    and step < self.config.trainer.total_steps:
                raise StopTraining(step)

    Budgeted.__name__ = Budgeted.__qualname__ = f"Budgeted{trainer_cls.__name__}"
    return Budgeted


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", required=True, help="recipe name (recipes/<name>) or config .yaml")
    parser.add_argument("--work", required=True, help="folder for responses, eval json and the run summary")
    parser.add_argument("--eval-before", action="store_true", help="evaluate the model before training too")
    parser.add_argument("--train-budget-s", type=float, default=0.0, help="stop training after this many seconds "
                        "of fit (checked after each step); 0 = run all trainer.total_steps")
    parser.add_argument("--finish-by", type=float, default=None, metavar="UNIX_TIME",
                        help="the process must be done by then: training stops early enough to evaluate")
    parser.add_argument("--reserve-s", type=float, default=60.0, help="seconds kept for the evaluation after "
                        "training (with --finish-by)")
    parser.add_argument("--engine-ok", metavar="FILE", help="touch FILE once the trainer and its engine are built")
    parser.add_argument("--gsm8k", required=True, help="GSM8K test parquet (`recipezoo data gsm8k`)")
    parser.add_argument("--aime", required=True, help="AIME24 parquet (`recipezoo data aime24`)")
    parser.add_argument("--gsm8k-max-samples", type=int, default=None, help="first N problems; default all")
    parser.add_argument("--gsm8k-max-tokens", type=int, default=512)
    parser.add_argument("--aime-max-samples", type=int, default=None, help="first N problems; default all")
    parser.add_argument("--aime-n", type=int, default=16, help="samples per AIME problem (mean@n, pass@k)")
    parser.add_argument("--aime-temperature", type=float, default=0.6)
    parser.add_argument("--aime-top-p", type=float, default=0.95)
    parser.add_argument("--aime-max-tokens", type=int, default=1024)
    parser.add_argument("--eval-max-prompt-length", type=int, default=512, help="tokens (AIME24's longest: 465)")
    args, overrides = parser.parse_known_args(argv)
    overrides = [o for o in overrides if o != "--"]
    unknown = [o for o in overrides if o.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args, overrides


def eval_sets(args: argparse.Namespace) -> list[tuple[str, dict, tuple[str, ...]]]:
    """(name, generation settings, GSM8K graders to score with) per evaluation set."""
    return [
        ("gsm8k", dict(data=(args.gsm8k,), n=1, temperature=0.0, max_tokens=args.gsm8k_max_tokens,
                       max_samples=args.gsm8k_max_samples), ("strict", "flexible")),
        ("aime24", dict(data=(args.aime,), n=args.aime_n, temperature=args.aime_temperature, top_p=args.aime_top_p,
                        max_tokens=args.aime_max_tokens, max_samples=args.aime_max_samples), ("strict",)),
    ]


def evaluate_policy(trainer, args, *, who: str, label: str, tags: dict[str, str]) -> dict:
    """Generate on every eval set with the trainer's engine, then `recipezoo eval` each file (MLflow runs
    with `tags`). Returns {set: {grader: report}} and the generation seconds."""
    config, work = trainer.config, Path(args.work)
    rollout = trainer.actor_rollout.rollout  # local controller: the engine lives in this process
    figures, seconds = {}, {}
    for name, settings, graders in eval_sets(args):
        spec = GenerationSpec(model=label, max_prompt_length=args.eval_max_prompt_length, batch_size=1_000_000,
                              seed=config.trainer.seed, rollout=config.rollout.name, device=config.trainer.device,
                              **settings)
        started = time.perf_counter()
        responses = generate_responses(spec, work / f"{who}_{name}.parquet", rollout=rollout,
                                       tokenizer=trainer.tokenizer)
        seconds[name] = round(time.perf_counter() - started, 2)
        for grader in graders:
            out = work / f"{who}_{name}_{grader}.json"
            argv = ["eval", "--responses", str(responses), "--gsm8k-method", grader, "--reward-manager", "naive",
                    "--experiment", config.tracking.experiment, "--seed", str(config.trainer.seed),
                    "--run-name", f"{who}-{name}" + (f"-{grader}" if name == "gsm8k" else ""), "--out", str(out)]
            argv += ["--mlflow-uri", config.tracking.uri] if config.tracking.uri else []
            for key, value in tags.items():
                argv += ["--tag", f"{key}={value}"]
            if recipezoo(argv) != 0:
                raise RuntimeError(f"recipezoo {' '.join(argv)} failed")
            figures.setdefault(name, {})[grader] = json.loads(out.read_text())["results"]
    print(f"[bench] {who}: generation took {seconds} s", flush=True)
    return {"figures": figures, "generation_s": seconds}


def finish_budget_stopped_run(trainer, step: int) -> None:
    """The StopTraining exception left the MLflow run FAILED; it is a complete run of `step` steps."""
    import mlflow

    from core.tracking.mlflow_tracker import normalize_tracking_uri

    client = mlflow.MlflowClient(normalize_tracking_uri(trainer.config.tracking.uri))
    run_id = trainer.tracking.run_id
    client.set_tag(run_id, "stopped_by_budget", f"after step {step} of {trainer.config.trainer.total_steps}")
    client.set_terminated(run_id, status="FINISHED")


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    timings, started = {}, time.perf_counter()
    config = load_config(args.recipe, overrides)
    if config.trainer.controller != "local":
        raise SystemExit("this benchmark evaluates with the trainer's own engine: trainer.controller=local")
    trainer_cls = with_budget(load_trainer_class(config.trainer.cls), args.train_budget_s, args.finish_by,
                              args.reserve_s)
    trainer = trainer_cls(config)
    timings["setup_s"] = round(time.perf_counter() - started, 2)
    print(f"[bench] {args.recipe}: trainer and {config.rollout.name} engine ready in {timings['setup_s']} s "
          f"(enforce_eager={config.rollout.enforce_eager})", flush=True)
    if args.engine_ok:
        Path(args.engine_ok).touch()
    model, recipe = str(config.model.path), str(config.tracking.tags.get("recipe", args.recipe))
    summary = {"recipe": recipe, "model": model, "overrides": overrides, "enforce_eager": config.rollout.enforce_eager,
               "planned_steps": config.trainer.total_steps}
    if args.eval_before:
        started = time.perf_counter()
        summary["before"] = evaluate_policy(trainer, args, who="before", label=model,
                                            tags={"eval_stage": "before", "eval_model": model})
        timings["eval_before_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    try:
        trainer.fit()
        steps = config.trainer.total_steps
    except StopTraining as stop:
        steps = int(stop.args[0])
        print(f"[bench] {recipe}: training budget of {trainer.budget:.0f} s reached; stopped after step {steps} "
              f"of {config.trainer.total_steps} (the trainer's `run FAILED` above is this stop: the MLflow run is "
              "marked FINISHED, tagged stopped_by_budget)", flush=True)
        finish_budget_stopped_run(trainer, steps)
    summary["train_budget_s"] = round(trainer.budget, 1)
    timings["train_s"] = round(time.perf_counter() - started, 2)
    run_id = trainer.tracking.run_id
    summary.update(train_run_id=run_id, steps=steps, stopped_by_budget=steps < config.trainer.total_steps)
    started = time.perf_counter()
    summary["after"] = evaluate_policy(
        trainer, args, who=f"after_{recipe}", label=f"{model} after {recipe} ({steps} steps, run {run_id})",
        tags={"eval_stage": "after", "eval_model": model, "eval_recipe": recipe, "eval_train_run": run_id})
    timings["eval_after_s"] = round(time.perf_counter() - started, 2)
    summary["timings"] = timings
    (work / f"{recipe}.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"[bench] {recipe}: done; timings {timings}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
