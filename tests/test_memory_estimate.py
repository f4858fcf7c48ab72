"""The per-GPU memory check that runs before any model loads, with hand-computed numbers."""

import pytest
from omegaconf import OmegaConf

from core.trainer.memory_estimate import (
    GIB,
    ModelShape,
    activation_bytes,
    check_engine_holds_weights,
    count_parameters,
    training_state,
)


def config(**rollout):
    return OmegaConf.create({"actor": {"cpu_offload": False, "mixed_precision": "auto"},
                             "rollout": {"name": "vllm", "tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.35,
                                         **rollout}})


def test_qwen3_8b_parameter_count_from_its_config_alone():
    assert count_parameters("bench/configs/qwen3-8b") == 8_190_735_360  # Qwen3-8B's published 8.19B


def test_training_state_by_hand():
    # 1e9 params on 2 GPUs: actor 16 B/param / 2 = 8e9 B; reference 4 B/param / 2 = 2e9 B -> 1e10 B
    assert sum(training_state(config(), 10**9, 2, with_reference=True, with_critic=False).values()) == 1e10
    with_critic = training_state(config(), 10**9, 2, with_reference=False, with_critic=True)
    assert sum(with_critic.values()) == 1.6e10  # actor + critic, 32 B/param over 2


def test_an_8b_full_finetune_does_not_fit_one_h100():
    from core.trainer.memory_estimate import check_phases

    # 12 B a parameter without gradients = 91.5 GiB: beyond the GPU before any engine share, so no share fits.
    config = phase_config()
    with pytest.raises(ValueError, match=r"^generation needs 122\.7 GiB per GPU \(training state without gradients "
                                         r"91\.5 GiB \+ .* of a 79\.2 GiB GPU: use more GPUs"):
        check_phases(config, phases(config, 79.2, ranks=1))


def test_a_disaggregated_engine_leaves_the_training_gpus_to_training():
    # One 8B policy on 2 H100s: 45.8 GiB of weights and moments; beside the engine's 0.6 × 79.2 = 47.5 GiB share
    # and 3.4 of runtime it does not fit; with the engine on a GPU of its own, the training GPUs hold no share.
    from core.trainer.memory_estimate import check_phases

    colocated = phase_config(**{"rollout.gpu_memory_utilization": 0.6, "actor.micro_batch_tokens": 12_000})
    with pytest.raises(ValueError, match=r"^generation needs 96\.7 GiB"):
        check_phases(colocated, phases(colocated, 79.2))
    disaggregated = phase_config(**{"rollout.gpu_memory_utilization": 0.6, "actor.micro_batch_tokens": 12_000,
                                    "trainer.controller": "ray",
                                    "trainer.placement": "disaggregated", "trainer.schedule": "one_step_off"})
    found = phases(disaggregated, 79.2)
    assert found["engine"] == 0 and found["generation_peak"] / GIB == pytest.approx(45.8 + 3.4, abs=0.05)
    check_phases(disaggregated, found)


def test_engine_share_smaller_than_its_weights_names_the_key():
    with pytest.raises(ValueError, match=r"rollout.gpu_memory_utilization gives the engine 7\.9 GiB .* need 15\.3 GiB"):
        check_engine_holds_weights(config(gpu_memory_utilization=0.1), 8_190_735_360, 79.2 * GIB)
    check_engine_holds_weights(config(name="hf", gpu_memory_utilization=0.1), 8_190_735_360, 79.2 * GIB)


def test_an_8b_lora_policy_fits_one_h100_by_hand():
    from core.trainer.memory_estimate import count_adapter_parameters

    lora = OmegaConf.merge(config(), {"model": {"gguf_file": None, "trust_remote_code": False},
                                      "actor": {"lora": {"rank": 16, "alpha": 32, "dropout": 0.0,
                                                         "target_modules": "all-linear"}}})
    # Per layer, 16·(in + out): q and o 16·8192, k and v 16·5120, gate, up and down 16·16384 = 1,212,416; × 36 layers.
    adapters = count_adapter_parameters(lora, "bench/configs/qwen3-8b")
    assert adapters == 36 * 1_212_416
    state = training_state(lora, 8_190_735_360, 1, with_reference=True, with_critic=False, adapter_params=adapters)
    # bf16 base 2 B/param + 16 B per adapter parameter; no reference copy (the base is the reference).
    assert sum(state.values()) == 8_190_735_360 * 2 + adapters * 16


def phase_config(recipe: str = "dapo", **overrides):
    from core.config import load_config

    return load_config(recipe, ["model.path=bench/configs/qwen3-8b", "model.init=random", "trainer.n_gpus_per_node=2",
                                "rollout.name=vllm", "data.train_batch_size=16", "actor.ppo_mini_batch_size=8",
                                "data.max_response_length=2048", "actor.micro_batch_size=16",
                                "actor.gradient_checkpointing=true", "rollout.gpu_memory_utilization=0.35",
                                *(f"{key}={value}" for key, value in overrides.items())])


def phases(config, device_gib: float, ranks: int = 2) -> dict:
    from core.trainer.memory_estimate import ModelShape, per_gpu_memory

    return per_gpu_memory(config, ModelShape.from_pretrained("bench/configs/qwen3-8b"), 8_190_735_360, ranks,
                          device_gib * GIB, with_reference=False, with_critic=False)


def test_an_engine_share_too_large_for_the_gpu_names_the_share_that_fits():
    from core.trainer.memory_estimate import check_phases

    config = phase_config(**{"rollout.gpu_memory_utilization": 0.6})
    # DAPO 8B on 2 H100s: 45.8 GiB of weights and moments + 0.6 · 79.2 = 47.5 GiB share + 3.4 runtime = 96.7 GiB;
    # the share that fits: (79.2 - 45.8 - 3.4) / 79.2 = 0.38.
    with pytest.raises(ValueError, match=r"generation needs 96\.7 GiB per GPU .* of a 79\.2 GiB GPU: lower "
                                         r"rollout\.gpu_memory_utilization to 0\.38 or less"):
        check_phases(config, phases(config, 79.2))


def test_a_micro_batch_too_long_for_the_gpu_names_the_token_budget_that_fits():
    from core.trainer.memory_estimate import check_phases

    config = phase_config(**{"actor.micro_batch_tokens": 200_000})
    found = phases(config, 139.8)
    # 16 B × 8.19B / 2 = 61.03 GiB of state + 6.79 gathered + 200,000 tokens × 481,280 B = 89.65 + a 2.32 logits
    # chunk + 3.4 runtime = 163.18 GiB.
    assert found["training_allocated"] / GIB == pytest.approx(163.18, abs=0.005)
    budget = int((139.8 * GIB - found["training_allocated"] + 200_000 * 481_280) / 481_280)
    with pytest.raises(ValueError, match=rf"the update needs 163\.2 GiB per GPU .* of a 139\.8 GiB GPU: set "
                                         rf"actor\.micro_batch_tokens={budget} or less \(now 200000 tokens"):
        check_phases(config, found)
    check_phases(phase_config(), phases(phase_config(), 139.8))  # the suite's DAPO on 2 H200s fits


def test_the_launch_check_refuses_before_any_model_loads(monkeypatch):
    import torch

    from core.trainer.memory_estimate import check_run_fits

    class H100:
        total_memory = int(79.2 * GIB)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: H100())
    config = phase_config(**{"trainer.device": "cuda", "rollout.gpu_memory_utilization": 0.6})
    with pytest.raises(ValueError, match=r"^generation needs .* rollout\.gpu_memory_utilization to 0\.38 or less"):
        check_run_fits(config, "bench/configs/qwen3-8b", 2, with_reference=False, with_critic=False)


def test_a_model_without_a_decoder_shape_still_has_its_state_checked():
    from core.trainer.memory_estimate import check_fits

    # 4e9 parameters on 1 GPU: 16 B each = 64e9 B = 59.6 GiB, beside 0.35 × 79.2 = 27.7 GiB of engine and 3.4 of
    # runtime: 90.7 GiB of a 79.2 GiB GPU. On 2 GPUs the state halves to 29.8 GiB: 60.9 GiB fits.
    cfg = config()
    runtime = 3.4 * GIB
    state = lambda ranks: sum(training_state(cfg, 4 * 10**9, ranks, with_reference=False, with_critic=False).values())  # noqa: E731
    found = {"state_only": state(1), "engine": 0.35 * 79.2 * GIB, "runtime": runtime, "device": 79.2 * GIB}
    with pytest.raises(ValueError, match=r"^the training state needs 59\.6 GiB per GPU beside the engine's share "
                                         r"27\.7 GiB and the CUDA runtime 3\.4 GiB, of a 79\.2 GiB GPU"):
        check_fits(cfg, 4 * 10**9, 79.2 * GIB, found)
    check_fits(cfg, 4 * 10**9, 79.2 * GIB, {**found, "state_only": state(2)})


def test_a_lora_policy_without_a_decoder_shape_counts_its_adapters_not_a_full_finetune(monkeypatch):
    from core.trainer.memory_estimate import ModelShape, count_adapter_parameters, run_memory

    def no_shape(*args):
        raise AttributeError("no intermediate_size")  # as a config that is not a Llama-style decoder's

    monkeypatch.setattr(ModelShape, "from_pretrained", no_shape)
    lora = phase_config(**{"actor.lora.rank": 16})
    adapters = count_adapter_parameters(lora, "bench/configs/qwen3-8b")
    _, found = run_memory(lora, "bench/configs/qwen3-8b", 1, 79.2 * GIB, with_reference=True, with_critic=False)
    # bf16 base 2 B/param + 16 B per adapter parameter, as the phase model counts it; not 16 B/param + a reference.
    assert found["state_only"] == 8_190_735_360 * 2 + adapters * 16


def test_without_a_decoder_shape_the_hf_engine_still_holds_its_fp32_copy(monkeypatch):
    from core.trainer.memory_estimate import ModelShape, run_memory

    def no_shape(*args):
        raise AttributeError("no intermediate_size")

    monkeypatch.setattr(ModelShape, "from_pretrained", no_shape)
    _, found = run_memory(phase_config(**{"rollout.name": "hf"}), "bench/configs/qwen3-8b", 2, 79.2 * GIB,
                          with_reference=False, with_critic=False)
    assert found["engine"] == 8_190_735_360 * 4  # as `per_gpu_memory` counts the HF backend's policy copy


def test_an_engine_kept_awake_holds_its_share_through_the_update():
    # rollout.free_cache_engine=false (the leaderboard's small-model jobs): the engine's 0.35 × 79.2 = 27.72 GiB share
    # stays allocated while the update runs; asleep (the default) it is not counted there.
    asleep = phases(phase_config(), 79.2)
    awake = phases(phase_config(**{"rollout.free_cache_engine": "false"}), 79.2)
    assert asleep["engine_awake"] == 0
    assert (awake["training_allocated"] - asleep["training_allocated"]) / GIB == pytest.approx(0.35 * 79.2)
    assert awake["generation_peak"] == asleep["generation_peak"]


def test_an_off_policy_schedule_keeps_the_colocated_engine_awake_through_the_update():
    # one_step_off and async generate the next batch in a thread while the update runs on the same GPUs: the
    # engine's 0.35 × 79.2 = 27.72 GiB share is allocated beside the training state then, as with
    # rollout.free_cache_engine=false. Disaggregated, the engine has GPUs of its own: nothing on the training GPUs.
    from core.trainer.memory_estimate import engine_awake_reason

    sync = phases(phase_config("grpo"), 79.2)
    for schedule in ("one_step_off", "async"):
        config = phase_config("grpo", **{"trainer.schedule": schedule})
        assert engine_awake_reason(config) == f"trainer.schedule={schedule} generates beside the update"
        overlapped = phases(config, 79.2)
        assert (overlapped["training_allocated"] - sync["training_allocated"]) / GIB == pytest.approx(0.35 * 79.2)
    # Its share can then rise only as far as the update allows: on 140.4 GiB, 95% of it less what the update holds
    # besides the engine (the generation phase would allow more).
    from core.trainer.memory_estimate import engine_share_within

    limit, h200 = 0.95 * 140.4 * GIB, phases(config, 140.4)
    share = engine_share_within(config, h200, limit)
    assert share == pytest.approx((limit - h200["training_peak"] + h200["engine_awake"]) / (140.4 * GIB))
    assert 0 < share < engine_share_within(phase_config("grpo"), phases(phase_config("grpo"), 140.4), limit)
    apart = phase_config("grpo", **{"trainer.schedule": "async", "trainer.placement": "disaggregated"})
    assert engine_awake_reason(apart) is None and phases(apart, 79.2)["engine_awake"] == 0
    assert engine_awake_reason(phase_config()) is None


def test_expandable_segments_named_only_where_the_cached_blocks_alone_are_over():
    from core.trainer.memory_estimate import expandable_segments_lever

    def settings(on=False, engine="vllm"):
        return OmegaConf.create({"actor": {"expandable_segments": on}, "rollout": {"name": engine}})

    found = {"training_allocated": 90 * GIB, "generation_peak": 80 * GIB, "allocator_cache": 25.4 * GIB}
    assert expandable_segments_lever(settings(), found, 95 * GIB) == \
        "actor.expandable_segments=true (no cached blocks: 25.4 GiB less)"
    assert expandable_segments_lever(settings(on=True), found, 95 * GIB) is None  # already on
    assert expandable_segments_lever(settings(engine="sglang"), found, 95 * GIB) is None  # refused beside SGLang
    assert expandable_segments_lever(settings(), found, 85 * GIB) is None  # the update's own bytes are over
    assert expandable_segments_lever(settings(), {**found, "generation_peak": 96 * GIB}, 95 * GIB) is None


def test_activations_with_the_first_layers_checkpointed_by_hand():
    """4 layers of hidden 8, kv width 4, intermediate 16: a layer's internals are 2 bytes × (7·8 + 3·4 + 5·16) = 296
    bytes a token, its input 2 × 8 = 16. 10 tokens."""
    shape = ModelShape(hidden=8, layers=4, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=32,
                       tied_embeddings=False)

    def parts(checkpointed):
        found = activation_bytes(shape, 10, checkpointed=checkpointed, chunk_tokens=1)
        return found["layer_inputs"], found["layer_internals"]

    assert parts(0) == (0, 296 * 10 * 4)  # every layer keeps its internals
    assert parts(4) == (16 * 10 * 4, 296 * 10 * 1)  # every layer keeps its input; one recomputes at a time
    assert parts(1) == (16 * 10 * 1, 296 * 10 * 3)  # the 3 others' internals, freed before layer 0 recomputes
    assert parts(3) == (16 * 10 * 3, 296 * 10 * 1)  # one kept, or one recomputed: the same peak
