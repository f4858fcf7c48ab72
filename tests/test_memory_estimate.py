"""The per-GPU memory check that runs before any model loads, with hand-computed numbers."""

import pytest
from omegaconf import OmegaConf

from core.trainer.memory_estimate import GIB, check_fits, count_parameters, estimate


def config(**rollout):
    return OmegaConf.create({"actor": {"cpu_offload": False},
                             "rollout": {"name": "vllm", "tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.35,
                                         **rollout}})


def test_qwen3_8b_parameter_count_from_its_config_alone():
    assert count_parameters("bench/configs/qwen3-8b") == 8_190_735_360  # Qwen3-8B's published 8.19B


def test_estimate_by_hand():
    # 1e9 params on 2 GPUs: actor 16 B/param / 2 = 8e9 B; reference 4 B/param / 2 = 2e9 B -> 1e10 B
    found = estimate(config(), 10**9, 2, 100.0, with_reference=True, with_critic=False)
    assert found.resident_gib == pytest.approx(1e10 / GIB)
    assert found.rollout_gib == pytest.approx(35.0) and found.rollout_weights_gib == pytest.approx(2e9 / GIB)
    with_critic = estimate(config(), 10**9, 2, 100.0, with_reference=False, with_critic=True)
    assert with_critic.resident_gib == pytest.approx(1.6e10 / GIB)  # actor + critic, 32 B/param over 2


def test_an_8b_full_finetune_does_not_fit_one_h100():
    found = estimate(config(), 8_190_735_360, 1, 79.2, with_reference=False, with_critic=False)
    with pytest.raises(ValueError, match=r"8\.19B parameters over 1 GPU\(s\): ≈ 122\.1 GiB of training state"):
        check_fits(found, 79.2)
    check_fits(estimate(config(), 8_190_735_360, 2, 139.8, with_reference=False, with_critic=False), 139.8)


def test_a_disaggregated_engine_leaves_the_training_gpus_to_training():
    # One 8B policy on 2 H100s: 61 GiB of training state each, which beside the engine's 27.7 GiB share does not
    # fit; with the engine on a GPU of its own, the fullest GPU holds the 61 GiB alone.
    disaggregated = OmegaConf.merge(config(), {"trainer": {"placement": "disaggregated"}})
    colocated = estimate(config(), 8_190_735_360, 2, 79.2, with_reference=False, with_critic=False)
    with pytest.raises(ValueError, match=r"≈ 61\.0 GiB of training state \+ 27\.7 GiB for the rollout engine"):
        check_fits(colocated, 79.2)
    found = estimate(disaggregated, 8_190_735_360, 2, 79.2, with_reference=False, with_critic=False)
    assert found.peak_gib == pytest.approx(found.resident_gib) and found.resident_gib == pytest.approx(61.0, abs=0.05)
    assert "61.0 GiB of training state per GPU and 27.7 GiB for the rollout engine on a GPU of its own" in found.summary()
    check_fits(found, 79.2)


def test_engine_share_smaller_than_its_weights_names_the_key():
    found = estimate(config(gpu_memory_utilization=0.1), 8_190_735_360, 8, 79.2, with_reference=False, with_critic=False)
    with pytest.raises(ValueError, match=r"rollout.gpu_memory_utilization gives the engine 7\.9 GiB .* need 15\.3 GiB"):
        check_fits(found, 79.2)


def test_dry_run_states_the_memory_per_gpu():
    from core.config import load_config
    from core.trainer.plan import format_plan, make_plan

    config = load_config("dapo", ["model.path=bench/configs/qwen3-8b", "model.init=random", "trainer.n_gpus_per_node=2",
                                  "rollout.name=vllm",
                                  "data.train_batch_size=16", "actor.ppo_mini_batch_size=8",
                                  "rollout.gpu_memory_utilization=0.35"])
    text = format_plan(make_plan(config))
    assert "memory       8.19B parameters over 2 GPU(s): ≈ 61.0 GiB of training state + 28.0 GiB" in text


def test_an_8b_lora_policy_fits_one_h100_by_hand():
    from core.trainer.memory_estimate import count_adapter_parameters

    lora = OmegaConf.merge(config(), {"model": {"gguf_file": None, "trust_remote_code": False},
                                      "actor": {"mixed_precision": "auto",
                                                "lora": {"rank": 16, "alpha": 32, "dropout": 0.0,
                                                         "target_modules": "all-linear"}}})
    # Per layer, 16·(in + out): q and o 16·8192, k and v 16·5120, gate, up and down 16·16384 = 1,212,416; × 36 layers.
    adapters = count_adapter_parameters(lora, "bench/configs/qwen3-8b")
    assert adapters == 36 * 1_212_416
    found = estimate(lora, 8_190_735_360, 1, 79.2, with_reference=True, with_critic=False, adapter_params=adapters)
    # bf16 base 2 B/param + 16 B per adapter parameter; no reference copy (the base is the reference).
    assert found.resident_gib == pytest.approx((8_190_735_360 * 2 + adapters * 16) / GIB)
    check_fits(found, 79.2)
