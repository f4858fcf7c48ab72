"""`recipezoo` builds its parser without the training stack: `recipezoo --help` (and the subcommands that need
neither, e.g. `data`, `leaderboard run`) must not wait seconds for torch and transformers to import."""

import argparse
import subprocess
import sys
from pathlib import Path

from core.cli import build_parser, main
from core.trainer.checkpoint import TRAINER_STATE

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "vllm", "mlflow", "math_verify")


def test_building_the_parser_imports_none_of_the_training_stack():
    probe = ("import sys; from core.cli import build_parser; build_parser(); "
             f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_data_writes_its_parquet_without_the_training_stack(tmp_path):
    """`recipezoo data` converts a file and writes parquet with pyarrow alone (core/data/rows.py): torch stays out."""
    local = tmp_path / "test.jsonl"
    local.write_text('{"question": "What is 2+3?", "answer": "2+3=5\\n#### 5"}\n')
    probe = ("import sys; from core.cli import main; "
             f"main(['data', 'gsm8k', '--out', {str(tmp_path / 'out')!r}, '--split', 'test', '--local', {str(local)!r}]); "
             f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr
    assert (tmp_path / "out" / "test.parquet").stat().st_size > 0


def test_every_command_is_still_there():
    [commands] = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    assert set(commands.choices) == {"train", "sft", "rm", "data", "generate", "eval", "preference-pairs", "merge",
                                     "leaderboard", "doctor", "fetch-model"}


def test_merge_refuses_an_unknown_role_in_one_line_naming_the_known_ones(tmp_path, capsys):
    (tmp_path / TRAINER_STATE).write_bytes(b"")  # a global_step_N dir as find_checkpoint recognises one
    assert main(["merge", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "out"), "--role", "policy"]) == 1
    assert "--role 'policy': expected one of ['actor', 'critic', 'reward_model']" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
