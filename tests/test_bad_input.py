"""Bad input to `recipezoo train` stops before any training with one line naming what to fix."""

import pytest

from core.cli import main as cli_main
from core.data.dataset import write_rows


def train(fast_overrides, *extra):
    return cli_main(["train", "--recipe", "grpo", *fast_overrides, *extra])


def test_a_model_path_that_does_not_exist(fast_overrides, tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    assert train(fast_overrides, f"model.path={missing}") == 2
    err = capsys.readouterr().err
    assert f"model.path='{missing}' does not exist" in err and "Traceback" not in err


def test_a_reward_function_file_with_a_syntax_error(fast_overrides, tmp_path, capsys):
    broken = tmp_path / "my_reward.py"
    broken.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None)\n    return 1.0\n")
    assert train(fast_overrides, f"reward.custom_function.path={broken}") == 2
    err = capsys.readouterr().err
    assert str(broken) in err and "syntax error at line 1" in err and "reward.custom_function.path" in err


def test_a_parquet_without_reward_model_ground_truth(fast_overrides, tmp_path):
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1?"}],
             "reward_model": {"style": "rule"}} for _ in range(8)]
    bad = write_rows(rows, tmp_path / "train.parquet")
    with pytest.raises(ValueError) as error:
        train(fast_overrides, f"data.train_files={bad}", f"data.val_files={bad}")
    message = str(error.value)
    assert str(bad) in message and "'reward_model.ground_truth'" in message and "data.ground_truth_key" in message


def test_resume_from_a_checkpoint_that_does_not_exist(fast_overrides, tmp_path, capsys):
    assert train(fast_overrides, f"trainer.resume={tmp_path}/nope") == 2
    assert "trainer.resume=" in capsys.readouterr().err
