"""`actor.checkpoint_layers`: gradient checkpointing on the first N decoder layers only. The gradients are those of
no checkpointing at all (recompute changes when activations exist, not what they are), only the first N layers
recompute, and a count the model cannot give or a count without checkpointing is one line before anything starts."""

import copy

import pytest
import torch

from core.config import ConfigError, load_config
from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine, OptimConfig
from core.engine.sharding import decoder_layers
from core.models.lora import LoraSpec
from core.models.tiny import build_tiny_tokenizer
from core.trainer.config_checks import validate_config
from tests.helpers_policy import sampled_batch, tiny_policy


@pytest.fixture(scope="module")
def model():
    return tiny_policy(build_tiny_tokenizer())  # 2 decoder layers


@pytest.fixture(scope="module")
def batch(model, tmp_path_factory):
    return sampled_batch(model, build_tiny_tokenizer(), tmp_path_factory.mktemp("data"), prompts=4, n=2,
                         max_new_tokens=10)


def engine(model, **kwargs):
    torch.manual_seed(1)
    return FSDPEngine(copy.deepcopy(model), init_distributed("cpu"), optim=OptimConfig(lr=1e-2, grad_clip=1e9),
                      mixed_precision="fp32", **kwargs)


def grad_norm(engine, batch) -> float:
    def loss_fn(log_probs, entropy, micro, num_tokens, num_seqs):
        return -(log_probs * micro["advantages"] * micro["response_mask"]).sum() / num_tokens, {}

    return engine.update(batch, loss_fn, mini_batch_size=len(batch))["actor/grad_norm"]


def recomputing(engine) -> list[bool]:
    return [layer.gradient_checkpointing for layer in decoder_layers(engine.model)]


def test_only_the_first_layers_recompute_and_the_gradients_do_not_change(model, batch):
    plain, every, first = engine(model), engine(model, gradient_checkpointing=True), \
        engine(model, gradient_checkpointing=True, checkpoint_layers=1)
    assert recomputing(every) == [True, True] and recomputing(first) == [True, False]
    expected = grad_norm(plain, batch)
    assert expected > 0
    assert grad_norm(every, batch) == pytest.approx(expected, rel=1e-5)
    assert grad_norm(first, batch) == pytest.approx(expected, rel=1e-5)


def test_with_lora_the_adapters_still_train(model, batch):
    spec = LoraSpec(rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear")
    assert grad_norm(engine(model, gradient_checkpointing=True, checkpoint_layers=1, lora=spec), batch) \
        == pytest.approx(grad_norm(engine(model, lora=spec), batch), rel=1e-5)


def test_more_layers_than_the_model_has_is_one_line(model):
    with pytest.raises(ValueError, match=r"actor.checkpoint_layers=3: expected 1 to the model's 2 decoder layers"):
        engine(model, gradient_checkpointing=True, checkpoint_layers=3)


def test_checkpoint_layers_without_checkpointing_is_refused_by_the_config():
    def check(*overrides):
        return validate_config(load_config("grpo", list(overrides)), world=(1, "test"))

    with pytest.raises(ConfigError, match="actor.checkpoint_layers=4 with actor.gradient_checkpointing=false"):
        check("actor.checkpoint_layers=4")
    with pytest.raises(ConfigError, match="actor.checkpoint_layers"):
        check("actor.gradient_checkpointing=true", "actor.checkpoint_layers=0")
    assert check("actor.gradient_checkpointing=true", "actor.checkpoint_layers=4")["actor"]["checkpoint_layers"] == 4


def test_a_run_asking_for_more_layers_than_its_model_has_stops_before_any_load(tmp_path, capsys):
    from core.cli import main

    code = main(["train", "--recipe", "grpo", "actor.gradient_checkpointing=true", "actor.checkpoint_layers=9",
                 "trainer.total_steps=1", f"trainer.output_dir={tmp_path}", f"tracking.uri=file:{tmp_path}/mlruns"])
    assert code != 0
    err = capsys.readouterr().err
    assert "actor.checkpoint_layers=9: expected 1 to the model's 2 decoder layers" in err
    assert not (tmp_path / "mlruns").exists()  # no stray MLflow run


def test_the_dry_run_plans_a_partial_count_and_refuses_one_beyond_the_model(capsys):
    from core.cli import main

    config = ["--recipe", "grpo", "--dry-run", "model.path=bench/configs/qwen3-0.6b", "model.init=random",
              "actor.gradient_checkpointing=true"]

    def activations(count: int) -> str:
        assert main(["train", *config, f"actor.checkpoint_layers={count}"]) == 0
        line = next(line for line in capsys.readouterr().out.splitlines() if "activations of" in line)
        return line.split("activations of ")[1].split(" + ")[0]

    assert float(activations(28).split()[-1]) < float(activations(14).split()[-1])  # fewer recomputed, more held
    assert main(["train", *config, "actor.checkpoint_layers=99"]) != 0
    assert "actor.checkpoint_layers=99: expected 1 to the model's 28 decoder layers" in capsys.readouterr().err
