"""`recipezoo` builds its parser without the training stack: `recipezoo --help` (and the subcommands that need
neither, e.g. `data`, `leaderboard run`) must not wait seconds for torch and transformers to import."""

import subprocess
import sys
from pathlib import Path

from core.trainer.checkpoint_export import ROLE_CLASSES
from core.trainer.merge_command import ROLES

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "vllm", "mlflow", "math_verify")


def test_building_the_parser_imports_none_of_the_training_stack():
    probe = ("import sys; from core.cli import build_parser; build_parser(); "
             f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_every_command_is_still_there():
    result = subprocess.run([sys.executable, "-m", "core.cli", "--help"], cwd=REPO, capture_output=True, text=True,
                            check=True)
    for command in ("train", "sft", "rm", "data", "generate", "eval", "preference-pairs", "merge", "leaderboard",
                    "doctor", "fetch-model"):
        assert command in result.stdout, command


def test_merge_offers_the_roles_the_export_knows():
    assert ROLES == sorted(ROLE_CLASSES)
