"""Bad input to `recipezoo train`, also what only shows once training starts, ends in one line naming what
to fix (`recipezoo: <what> — <fix>`, exit 2); other errors in one line too (exit 1), the traceback on request."""

import shutil
import textwrap

import pyarrow.parquet as pq
import pytest

from core.cli import main as cli_main
from core.data.rows import write_rows


def train(fast_overrides, *extra):
    return cli_main(["train", "--recipe", "grpo", *fast_overrides, *extra])


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("recipezoo: "), err
    return err


# ---- the model ---------------------------------------------------------------------------------
def test_a_model_path_that_does_not_exist(fast_overrides, tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    assert train(fast_overrides, f"model.path={missing}") == 2
    assert f"model.path='{missing}' does not exist" in one_line(capsys)


def test_an_empty_model_dir_names_the_missing_tokenizer(fast_overrides, tmp_path, capsys):
    empty = tmp_path / "empty-model"
    empty.mkdir()
    assert train(fast_overrides, f"model.path={empty}") == 2
    err = one_line(capsys)
    assert f"model dir {empty}: no tokenizer (tokenizer.json" in err and "save_pretrained" in err
    assert "sentencepiece" not in err and "tiktoken" not in err


def test_a_model_dir_without_weights_names_them(fast_overrides, random_model_dir, tmp_path, capsys):
    no_weights = tmp_path / "no-weights"
    shutil.copytree(random_model_dir, no_weights, ignore=shutil.ignore_patterns("*.safetensors"))
    assert train(fast_overrides, f"model.path={no_weights}") == 2
    assert f"model dir {no_weights}: no weights (*.safetensors or pytorch_model.bin) in it" in one_line(capsys)


# ---- the reward function -----------------------------------------------------------------------
def test_a_reward_function_file_with_a_syntax_error(fast_overrides, tmp_path, capsys):
    broken = tmp_path / "my_reward.py"
    broken.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None)\n    return 1.0\n")
    assert train(fast_overrides, f"reward.custom_function.path={broken}") == 2
    err = one_line(capsys)
    assert str(broken) in err and "syntax error at line 1" in err and "reward.custom_function.path" in err


def test_a_reward_function_that_raises_at_import(fast_overrides, tmp_path, capsys):
    broken = tmp_path / "raising_reward.py"
    broken.write_text("raise RuntimeError('the grader service is down')\n")
    assert train(fast_overrides, f"reward.custom_function.path={broken}",
                 f"trainer.output_dir={tmp_path}/out") == 2
    err = one_line(capsys)
    assert f"{broken}: importing the file raised RuntimeError: the grader service is down — fix the file" in err
    assert not (tmp_path / "out").exists(), "fails before the run claims its output dir"


# ---- data files --------------------------------------------------------------------------------
def test_a_data_file_that_does_not_exist(fast_overrides, tmp_path, capsys):
    missing = tmp_path / "nope.parquet"
    assert train(fast_overrides, f"data.train_files={missing}") == 2
    assert f"{missing}: no such file" in one_line(capsys)


def test_a_parquet_without_reward_model_ground_truth(fast_overrides, tmp_path, capsys):
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1?"}],
             "reward_model": {"style": "rule"}} for _ in range(8)]
    bad = write_rows(rows, tmp_path / "train.parquet")
    assert train(fast_overrides, f"data.train_files={bad}", f"data.val_files={bad}") == 2
    err = one_line(capsys)
    assert str(bad) in err and "'reward_model.ground_truth'" in err and "data.ground_truth_key" in err


def test_an_empty_parquet_file(fast_overrides, tmp_path, capsys):
    empty = tmp_path / "train.parquet"
    empty.write_bytes(b"")
    assert train(fast_overrides, f"data.train_files={empty}") == 2
    assert f"{empty}: the file is empty (0 bytes) — regenerate it" in one_line(capsys)


def test_a_parquet_with_a_schema_but_no_rows(fast_overrides, tmp_path, capsys):
    rows = [{"data_source": "openai/gsm8k", "prompt": "1+1?", "reward_model": {"ground_truth": "2"}}]
    rowless = tmp_path / "rowless.parquet"
    pq.write_table(pq.read_table(write_rows(rows, tmp_path / "one.parquet")).slice(0, 0), rowless)
    assert train(fast_overrides, f"data.train_files={rowless}") == 2
    assert f"{rowless}: the file has no rows" in one_line(capsys)


def test_a_truncated_parquet_file(fast_overrides, tmp_path, capsys):
    rows = [{"data_source": "openai/gsm8k", "prompt": "1+1?", "reward_model": {"ground_truth": "2"}}] * 4
    whole = write_rows(rows, tmp_path / "whole.parquet").read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole[: len(whole) // 2])
    assert train(fast_overrides, f"data.train_files={cut}") == 2
    assert f"{cut}: not a readable parquet file" in one_line(capsys)


# ---- checkpoints ---------------------------------------------------------------------------------
def test_resume_from_a_checkpoint_that_does_not_exist(fast_overrides, tmp_path, capsys):
    assert train(fast_overrides, f"trainer.resume={tmp_path}/nope") == 2
    assert "trainer.resume=" in one_line(capsys)


# ---- everything else: one line and exit 1, the traceback with --debug ----------------------------
BOOM_TRAINER = """\
    from core.trainer.base import BaseTrainer


    class BoomTrainer(BaseTrainer):
        def __init__(self, config):
            raise RuntimeError("boom\\nin two lines")
    """


def test_an_unexpected_error_is_one_line_with_the_debug_hint(fast_overrides, tmp_path, capsys):
    recipe = tmp_path / "boom.py"
    recipe.write_text(textwrap.dedent(BOOM_TRAINER))
    assert train(fast_overrides, f"trainer.cls={recipe}:BoomTrainer") == 1
    err = one_line(capsys)
    assert "RuntimeError: boom in two lines — rerun with --debug (or RECIPEZOO_DEBUG=1) for the traceback" in err
    with pytest.raises(RuntimeError, match="boom"):
        cli_main(["--debug", "train", "--recipe", "grpo", *fast_overrides, f"trainer.cls={recipe}:BoomTrainer"])
