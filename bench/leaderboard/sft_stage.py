"""The leaderboard's jobs from an SFT model: the record `recipezoo leaderboard sft-first` writes beside the SFT
weights (bench/leaderboard/sft_first.py), read and checked against --model, and each job again from those weights
in rows `sft+<recipe>`, with the SFT model's path, hash and run as its overrides and tags.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.leaderboard.sft_pipeline import SFT_ROW_PREFIX

SFT_RECORD = "recipezoo_sft.json"
SFT_EXPERIMENT = "sft"


def add_sft_model_arg(parser) -> None:
    parser.add_argument("--sft-model", metavar="DIR", help=f"also train every recipe × seed from this SFT model (a dir "
                        f"`recipezoo leaderboard sft-first` wrote, holding {SFT_RECORD}), in rows {SFT_ROW_PREFIX}<recipe>")


def read_sft_record(model_dir: str, base_model: str, base_sha256: str) -> dict:
    """The SFT model's record, checked against --model: SFT from another base would not compare with its rows."""
    path = Path(model_dir) / SFT_RECORD
    if not path.is_file():
        raise SystemExit(f"--sft-model {model_dir}: no {SFT_RECORD} in it; expected a dir written by "
                         "`recipezoo leaderboard sft-first` (its SFT run and base model)")
    record = json.loads(path.read_text())
    if record["base_model_sha256"] != base_sha256:
        raise SystemExit(f"--sft-model {model_dir}: trained from {record['base_model']} (sha256 "
                         f"{record['base_model_sha256'][:12]}…), not --model {base_model} (sha256 {base_sha256[:12]}…)")
    return record


def sft_label(record: dict) -> str:
    """The SFT starting point's name in the table (eval_model): its base and the SFT run it came from."""
    return f"{record['base_model']} + SFT run {record['sft_run_id'][:8]}"


def with_sft_jobs(jobs: list, record: dict | None) -> list:
    """Each job again from the SFT model: the pretrained evaluation as the SFT model's, each training job in row
    sft+<row>."""
    import dataclasses

    if record is None:
        return jobs
    label, extra = sft_label(record), []
    for job in jobs:
        row = None if job.variant is None else f"{SFT_ROW_PREFIX}{job.row}"
        name = "sft" if job.variant is None else f"{row}-seed{job.seed}"
        extra.append(dataclasses.replace(job, name=name, row=row, model=record["model_dir"], eval_model=label))
    return jobs + extra


def sft_job_overrides(job, common: list[str], record: dict | None) -> list[str]:
    """`common` with an SFT job's model and model hash in place of --model's."""
    if record is None or job.model is None:
        return common
    from core.leaderboard.export import MODEL_SHA_TAG, SFT_BASE_SHA_TAG, SFT_RUN_TAG

    kept = [o for o in common if not o.startswith(("model.path=", f"+tracking.tags.{MODEL_SHA_TAG}="))]
    return kept + [f"model.path={job.model}", f"+tracking.tags.{MODEL_SHA_TAG}={record['sft_model_sha256']}",
                   f"+tracking.tags.{SFT_RUN_TAG}={record['sft_run_id']}",
                   f"+tracking.tags.{SFT_BASE_SHA_TAG}={record['base_model_sha256']}"]


def sft_job_args(job, record: dict | None) -> list[str]:
    """job.py's flags for an SFT job: its evaluations under the SFT model's label and hash."""
    if record is None or job.model is None:
        return []
    return ["--eval-model", job.eval_model, "--model-sha256", record["sft_model_sha256"]]
