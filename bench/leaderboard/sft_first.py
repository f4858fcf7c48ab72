"""The GSM8K leaderboard's SFT stage: SFT the pretrained model on GSM8K's worked solutions, then RL from both.

    recipezoo leaderboard sft-first [--sft-steps 116] [--sft-lr 1e-5] [--sft-batch 64] <leaderboard run flags>

1. `recipezoo sft` trains --model on the suite's train file, each row's prompt answered by its worked solution
   (extra_info.answer, which ends in `#### N`), into --out/sft, tracked in --out/mlruns (experiment `sft`).
2. `recipezoo merge` exports its last checkpoint to --out/sft-model, a plain HF dir, with `recipezoo_sft.json`:
   the base model, the base model file's sha256, the SFT run's id, its settings and the new weights' sha256.
3. `recipezoo leaderboard run ... --sft-model --out/sft-model`: every recipe × seed from the pretrained model
   (rows `<recipe>`) and from the SFT weights (rows `sft+<recipe>`), at the same RL budget; --eval-before
   evaluates both starting points. The table has a section per starting point: the pretrained model's
   `before` is the pretrained column, the SFT section's `before` the SFT column.

--time-limit-s is the driver's, counted from its start once the SFT model is there. Rerunning the same command
resumes it: the SFT stage is skipped once --out/sft-model holds its record, and the
driver skips the jobs its store holds. The SFT weights are a new model file, with a sha256 of their own: their runs
are tagged with it, and the record says which base file (and hash) they were trained from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.leaderboard.sft_stage import SFT_EXPERIMENT, SFT_RECORD


def sft_command(args, sft_args, data: Path, suite, out: Path) -> list[str]:
    """`recipezoo sft` of --model on the suite's train file, the worked solution as each prompt's reply."""
    return [sys.executable, "-m", "core.cli", "sft", "--recipe", "sft", f"model.path={args.model}",
            f"data.train_files={data / suite.train_file}", f"data.val_files={data / suite.val_file}",
            "data.prompt_key=prompt", "data.response_key=extra_info.answer",
            f"data.max_prompt_length={args.max_prompt}", f"data.max_response_length={args.max_response}",
            "data.truncation=filter",  # the few solutions longer than the RL response limit are dropped, counted
            f"data.train_batch_size={sft_args.sft_batch}", f"actor.lr={sft_args.sft_lr}", "actor.warmup_steps=5",
            "actor.weight_decay=0.01", f"trainer.total_steps={sft_args.sft_steps}",
            f"trainer.save_freq={sft_args.sft_steps}", f"trainer.test_freq={sft_args.sft_steps}",
            f"trainer.output_dir={out / 'sft'}", f"tracking.uri={(out / 'mlruns').as_uri()}",
            f"tracking.experiment={SFT_EXPERIMENT}", "tracking.run_name=sft", *sft_args.sft_overrides]


def last_sft_run(uri: str) -> str:
    """The id of the store's latest finished SFT run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(SFT_EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id], "attributes.status = 'FINISHED'",
                              order_by=["attributes.start_time DESC"], max_results=1) if experiment else []
    if not runs:
        raise SystemExit(f"{uri}: no finished SFT run in experiment {SFT_EXPERIMENT!r} after `recipezoo sft`")
    return runs[0].info.run_id


def run_sft_stage(args, sft_args, data: Path, suite, out: Path, base_sha256: str) -> Path:
    """SFT, then its export to out/sft-model with its record; skipped when that record is there (a rerun)."""
    from core.models.identity import model_sha256

    model_dir = out / "sft-model"
    if (model_dir / SFT_RECORD).is_file():
        print(f"[sft] {model_dir} holds the SFT model already: skipping the SFT stage", flush=True)
        return model_dir
    repo = Path(__file__).resolve().parents[2]
    command = sft_command(args, sft_args, data, suite, out)
    print(f"[sft] {' '.join(command[2:])}", flush=True)
    if subprocess.call(command, cwd=repo) != 0:
        raise SystemExit("[sft] recipezoo sft failed (its output is above); nothing was trained from it")
    merge = [sys.executable, "-m", "core.cli", "merge", "--checkpoint", str(out / "sft" / "checkpoints"),
             "--out", str(model_dir)]
    if subprocess.call(merge, cwd=repo) != 0:
        raise SystemExit(f"[sft] {' '.join(merge[2:])} failed")
    record = {"base_model": args.model, "base_model_sha256": base_sha256,
              "sft_run_id": last_sft_run((out / "mlruns").as_uri()), "sft_command": " ".join(command[2:]),
              "sft_steps": sft_args.sft_steps, "sft_batch": sft_args.sft_batch, "sft_lr": sft_args.sft_lr,
              "model_dir": str(model_dir), "sft_model_sha256": model_sha256(model_dir)}
    (model_dir / SFT_RECORD).write_text(json.dumps(record, indent=2) + "\n")  # last: a half-made dir has none
    print(f"[sft] the SFT model: {model_dir} (sha256 {record['sft_model_sha256'][:12]}…)", flush=True)
    return model_dir


def parse_sft_args(argv: list[str]):
    import argparse

    parser = argparse.ArgumentParser(prog="recipezoo leaderboard sft-first", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    parser.add_argument("--sft-steps", type=int, default=116, help="SFT optimizer steps (116: one epoch of GSM8K's "
                        "7473 train solutions at 64 a step)")
    parser.add_argument("--sft-lr", type=float, default=1e-5, help="SFT's actor.lr (recipes/sft/run_qwen3_8b.sh's)")
    parser.add_argument("--sft-batch", type=int, default=64, help="SFT examples per optimizer step")
    parser.add_argument("--sft-override", dest="sft_overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override of the SFT run only (repeatable), e.g. trainer.device=cpu")
    if {"-h", "--help"} & set(argv):
        parser.print_help()
        print("\nEvery other flag is `recipezoo leaderboard run`'s (`recipezoo leaderboard run --help`).")
        raise SystemExit(0)
    sft_args, rest = parser.parse_known_args(argv)
    for name in ("sft_steps", "sft_batch"):
        if getattr(sft_args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(sft_args, name)}: expected a count of at least 1")
    if "--sft-model" in rest:
        parser.error("--sft-model: sft-first makes the SFT model itself (--out/sft-model)")
    return sft_args, rest


def main(argv: list[str] | None = None) -> int:
    from bench.leaderboard import driver
    from bench.leaderboard.suites import SUITES
    from core.models.identity import model_sha256
    from core.models.loading import resolve_model_path

    sft_args, rest = parse_sft_args(sys.argv[1:] if argv is None else argv)
    args = driver.parse_args(rest)  # every driver flag checked before SFT starts
    if args.merge or args.eval_before_only or args.suite != "gsm8k":
        raise SystemExit("sft-first: trains and evaluates the gsm8k suite (--suite gsm8k); --merge and "
                         "--eval-before-only are `recipezoo leaderboard run/merge`'s")
    base_sha = model_sha256(resolve_model_path(args.model))
    if args.model_sha256 and args.model_sha256 != base_sha:
        raise SystemExit(f"--model {args.model}: its model file has sha256 {base_sha}, not --model-sha256 "
                         f"{args.model_sha256}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = driver.prepare_data(args, SUITES[args.suite])
    model_dir = run_sft_stage(args, sft_args, data, SUITES[args.suite], out, base_sha)
    split = rest.index("--") if "--" in rest else len(rest)  # the flag before the config overrides
    return driver.main([*rest[:split], "--sft-model", str(model_dir), *rest[split:]])


if __name__ == "__main__":
    sys.exit(main())
