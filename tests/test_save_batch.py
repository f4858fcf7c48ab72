"""`trainer.save_batch_step`: the chosen step, and only it, leaves a batch bench/verl/numerics.py can load; a step or
a directory the run could not use is refused in one line before anything starts; the file round-trips."""

import numpy as np
import pytest
import torch

from core.batch import Batch
from core.cli import main
from core.config import ConfigError, load_config
from core.data.batch_file import OPTIONAL_KEYS, REQUIRED_KEYS, load_batch, save_batch
from core.trainer.config_checks import validate_config
from recipes.grpo.trainer import GRPOTrainer


def test_the_chosen_step_writes_a_loadable_batch_and_no_other_step_writes_one(fast_overrides, tmp_path):
    overrides = [o for o in fast_overrides if not o.startswith("trainer.total_steps")]
    trainer = GRPOTrainer(load_config("grpo", overrides + ["trainer.total_steps=3", "trainer.save_batch_step=2",
                                                           "actor.recompute_old_log_probs=always"]))
    updated = {}
    original = trainer.update_policy

    def spy(batch):  # the batch the update of each step trains on
        updated[trainer.global_step] = batch
        return original(batch)

    trainer.update_policy = spy
    trainer.fit()
    folder = tmp_path / "out" / "batches"  # base.yaml's default: under trainer.output_dir
    assert [p.name for p in folder.iterdir()] == ["batch_step2.pt"]
    loaded, trained = load_batch(folder / "batch_step2.pt"), updated[2]
    assert len(loaded) == 4 * 2
    for key in (*REQUIRED_KEYS, "old_log_probs"):
        assert torch.equal(loaded[key], trained[key]), key
    assert list(loaded.non_tensors["uid"]) == [str(uid) for uid in trained.non_tensors["uid"]]
    assert not torch.equal(loaded["input_ids"], updated[1]["input_ids"][: len(loaded)])  # step 2's rollout, not 1's


def test_no_batch_is_written_by_default(fast_overrides, tmp_path):
    GRPOTrainer(load_config("grpo", fast_overrides)).fit()
    assert not (tmp_path / "out" / "batches").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("trainer.save_batch_step=-1", "trainer.save_batch_step=-1 is out of range — expected ≥ 1"),
    ("trainer.save_batch_step=0", "trainer.save_batch_step=0 is out of range — expected ≥ 1"),
    ("trainer.save_batch_step=2", r"trainer.save_batch_step=2 is after the last step \(trainer.total_steps=1\)"),
    ("trainer.save_batch_step=two", "trainer.save_batch_step='two' is a string — expected an integer or null"),
])
def test_a_step_the_run_never_reaches_is_refused(fast_overrides, override, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(load_config("grpo", [*fast_overrides, override]))


def test_a_directory_that_cannot_be_created_is_refused_in_one_line_and_nothing_is_made(fast_overrides, tmp_path,
                                                                                        capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    code = main(["train", "--recipe", "grpo", *fast_overrides, "trainer.save_batch_step=1",
                 f"trainer.save_batch_dir={blocker}/batches"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"trainer.save_batch_dir='{blocker}/batches' cannot be created: {blocker} is not a directory" in err
    assert not (tmp_path / "out").exists()


def test_a_saved_batch_loads_back_with_its_groups_and_an_incomplete_one_is_named(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {key: torch.randint(0, 9, (4, 5), generator=gen) for key in ("input_ids", "attention_mask",
                                                                           "position_ids")}
    tensors |= {key: torch.randint(0, 9, (4, 3), generator=gen) for key in ("responses", "response_mask")}
    tensors |= {key: torch.randn(4, 3, generator=gen) for key in ("token_level_rewards", *OPTIONAL_KEYS, "values")}
    batch = Batch(tensors=tensors, non_tensors={"uid": np.array([0, 0, 1, 1], dtype=object)})
    loaded = load_batch(save_batch(batch, tmp_path / "deep" / "batch.pt"))
    assert sorted(loaded.tensors) == sorted((*REQUIRED_KEYS, *OPTIONAL_KEYS))  # `values` is not the comparison's
    for key in loaded.tensors:
        assert torch.equal(loaded[key], batch[key]), key
    assert list(loaded.non_tensors["uid"]) == ["0", "0", "1", "1"]
    torch.save({"input_ids": tensors["input_ids"]}, tmp_path / "partial.pt")
    with pytest.raises(ValueError, match="lacks .*'attention_mask'.*trainer.save_batch_step"):
        load_batch(tmp_path / "partial.pt")
