"""The 8-GPU plan without a GPU: bench/scale/plan.py runs both scripts' own dry runs, the per-GPU memory
arithmetic matches a hand computation, and bench/scale/report.py renders the plan from committed json."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]

from core.trainer.memory_estimate import (  # noqa: E402
    GIB,
    ModelShape,
    count_parameters,
    micro_batch_tokens_within,
    per_gpu_memory,
    training_state,
)

GSM8K_JSONL = ROOT.parent / "shared/data/gsm8k"
QWEN3_8B = ROOT / "bench/configs/qwen3-8b"
PARAMS = 8_190_735_360  # Qwen3-8B, counted from its config alone (test_memory_estimate.py)


def config(**actor):
    return OmegaConf.create({
        "data": {"max_prompt_length": 512, "max_response_length": 2048},
        "rollout": {"name": "vllm", "n": 16, "tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.5},
        "actor": {"cpu_offload": False, "mixed_precision": "auto", "ppo_mini_batch_size": 32, "micro_batch_size": 16,
                  "micro_batch_tokens": None, "tensor_parallel_size": 1, "gradient_checkpointing": True,
                  "checkpoint_layers": None,
                  "logprob_chunk_tokens": 2048, **actor}})


def test_a_fixed_kv_cache_is_the_engine_share_by_hand():
    """With vLLM's kv_cache_memory_bytes the engine holds its weights, its profiled forward and that cache, whatever
    gpu_memory_utilization says (the leaderboard driver's --engine-kv-gib)."""
    shape = ModelShape.from_pretrained(str(QWEN3_8B))
    fixed = config()
    fixed.rollout.engine_kwargs = {"kv_cache_memory_bytes": 4 * GIB}
    found = per_gpu_memory(fixed, shape, PARAMS, 8, 80e9, with_reference=False, with_critic=False)
    profile = 16384 * (3 * 12288 + 3 * 4096) * 2 + 0.12 * GIB  # as in the DAPO plan below
    assert found["rollout"]["kv_cache"] == 4 * GIB
    assert found["rollout"]["share"] == pytest.approx(PARAMS * 2 + profile + 4 * GIB)  # not 0.5 × 80 GB
    assert found["rollout"]["kv_tokens_per_engine"] == pytest.approx(4 * GIB / (2 * 36 * 1024 * 2))
    shared = per_gpu_memory(config(), shape, PARAMS, 8, 80e9, with_reference=False, with_critic=False)
    assert found["generation_peak"] - shared["generation_peak"] == pytest.approx(PARAMS * 2 + profile + 4 * GIB - 40e9)


def test_qwen3_8b_shape_adds_up_to_its_parameter_count():
    shape = ModelShape.from_pretrained(str(QWEN3_8B))
    # q and o 4096·4096, k and v 4096·1024, MLP 3·4096·12288, norms 2·4096 + 2·128 = 192,946,432 a layer;
    # root: embeddings and LM head 151936·4096 each, final norm 4096.
    assert shape.layer_params == 192_946_432 and shape.root_params == 1_244_663_808
    assert 36 * shape.layer_params + shape.root_params == count_parameters(str(QWEN3_8B)) == PARAMS


def test_8b_state_over_8_ranks_by_hand():
    state = training_state(config(), PARAMS, 8, with_reference=True, with_critic=False)
    # fp32 weights and grads 4 B, AdamW's two moments 8 B, the fp32 reference 4 B, each over 8 ranks.
    assert state == {"weights": 4_095_367_680, "grads": 4_095_367_680, "optimizer": 8_190_735_360,
                     "reference": 4_095_367_680}


def test_tensor_parallel_2_keeps_the_root_and_norms_whole_by_hand():
    """actor.tensor_parallel_size=2 on 2 GPUs (dp 1): the projections are split over both GPUs, the embeddings,
    LM head and norms stay whole on each, so a GPU holds (PARAMS + replicated) / 2 of the state, not PARAMS / 2.
    Measured at 8B on 2 H200s: 124.6 GiB (results/scale/grpo_qwen3-8b_2gpu_torchrun_tp2.json)."""
    shape = ModelShape.from_pretrained(str(QWEN3_8B))
    replicated = 1_244_663_808 + 36 * (2 * 4096 + 2 * 128)  # root + 36 layers' four norms = 1,244,967,936
    assert shape.replicated_params(PARAMS) == replicated == 1_244_967_936
    tp2 = per_gpu_memory(config(tensor_parallel_size=2), shape, PARAMS, 2, 140e9, with_reference=True,
                         with_critic=False)
    fsdp = per_gpu_memory(config(), shape, PARAMS, 2, 140e9, with_reference=True, with_critic=False)
    per_param = 4 + 4 + 8 + 4  # fp32 weights, grads, AdamW's moments, the fp32 reference
    assert sum(tp2["state"].values()) == (PARAMS + 1_244_967_936) * per_param / 2  # 94,357,032,960 B
    assert sum(tp2["state"].values()) - sum(fsdp["state"].values()) == 12_449_679_360  # 11.6 GiB more a GPU
    # each GPU gathers its half of two layers' bf16 weights and fp32 grads: 192,946,432 · (2 + 4) · 2 / 2
    assert tp2["gathered"]["layer_weights"] + tp2["gathered"]["layer_grads"] == 1_157_678_592
    assert tp2["gathered"]["root_weights"] == fsdp["gathered"]["root_weights"]


def test_dapo_8_gpus_phases_by_hand():
    shape = ModelShape.from_pretrained(str(QWEN3_8B))
    found = per_gpu_memory(config(), shape, PARAMS, 8, 80e9, with_reference=False, with_critic=False)
    tokens = 16 * (512 + 2048)  # a micro-batch of 16 full-length sequences, packed
    assert found["activations"] == {
        "layer_inputs": 2 * 4096 * tokens * 36,  # bf16 input of each of the 36 checkpointed layers
        "layer_internals": 2 * (7 * 4096 + 3 * 1024 + 5 * 12288) * tokens,  # one layer recomputed
        "logits_chunk": 2048 * 151936 * (2 + 4 + 2)}
    assert found["gathered"] == {"root_weights": 1_244_663_808 * 2, "layer_weights": 2 * 192_946_432 * 2,
                                 "layer_grads": 2 * 192_946_432 * 4, "lm_head_grad": 151936 * 4096 * 4}
    share = 0.5 * 80e9
    assert found["rollout"]["share"] == share and found["rollout"]["weights"] == PARAMS * 2
    # vLLM's start-up profile at its 16384 batched tokens (an 80 GB GPU): gate/up and activation outputs and three
    # hidden-size buffers, bf16, 16384 × (3 × 12288 + 3 × 4096) × 2 = 1.61 GB, plus 0.12 GiB outside torch.
    profile = 16384 * (3 * 12288 + 3 * 4096) * 2 + 0.12 * GIB
    assert found["rollout"]["profile"] == pytest.approx(profile)
    assert found["rollout"]["kv_tokens_per_engine"] == pytest.approx((share - PARAMS * 2 - profile) / (2 * 36 * 1024 * 2))
    state, runtime = 16 * PARAMS / 8, 3.4 * GIB  # the CUDA runtime is counted in both phases
    assert found["generation_peak"] == pytest.approx(state - 4 * PARAMS / 8 + share + runtime)  # gradients freed
    allocated = state + sum(found["gathered"].values()) + sum(found["activations"].values()) + runtime
    assert found["training_allocated"] == pytest.approx(allocated)
    # The allocator's cache: 1.6 more sets of the activations that follow the micro-batch's length.
    cache = 1.6 * (2 * 4096 * tokens * 36 + 2 * (7 * 4096 + 3 * 1024 + 5 * 12288) * tokens)
    assert found["allocator_cache"] == pytest.approx(cache)
    assert found["training_peak"] == pytest.approx(allocated + cache) == found["peak"]


def test_prompts_at_the_data_mean_length_set_the_micro_batch():
    shape = ModelShape.from_pretrained(str(QWEN3_8B))
    found = per_gpu_memory(config(), shape, PARAMS, 8, 80e9, with_reference=False, with_critic=False,
                           prompt_tokens=82.6)
    assert found["micro_batch_tokens"] == round(16 * (82.6 + 2048))  # 34,090, not 16 × 2560 = 40,960


def test_the_critic_has_a_scalar_head_in_place_of_the_lm_head():
    shape = ModelShape.from_pretrained(str(QWEN3_8B))
    # 36 layers + embeddings 151936·4096 + final norm 4096 + a 4096 → 1 value head.
    assert shape.value_params == 36 * 192_946_432 + 151936 * 4096 + 2 * 4096 == PARAMS - 151936 * 4096 + 4096
    found = per_gpu_memory(config(), shape, PARAMS, 4, 80e9, with_reference=False, with_critic=True)
    assert found["state"]["optimizer"] == 8 * (PARAMS + shape.value_params) / 4


def test_micro_batch_token_budget_within_a_limit_by_hand():
    shape = ModelShape.from_pretrained(str(QWEN3_8B))
    found = per_gpu_memory(config(), shape, PARAMS, 8, 80e9, with_reference=False, with_critic=False)
    per_token = 2 * 4096 * 36 + 2 * (7 * 4096 + 3 * 1024 + 5 * 12288)  # checkpointed inputs + one layer: 481,280 B
    fixed = found["training_allocated"] - per_token * 16 * 2560
    assert micro_batch_tokens_within(found, 70 * GIB, cached=False) == int((70 * GIB - fixed) / per_token)
    assert micro_batch_tokens_within(found, 70 * GIB, cached=True) == int((70 * GIB - fixed) / (per_token * 2.6))
    assert micro_batch_tokens_within(found, fixed / 2, cached=True) == 0  # the state alone is over the limit


# Issue 35's peaks on H200s (nvidia-smi, GiB of 140.4; random-init Qwen3-8B at bench/scale/suite.py's settings,
# rollout.gpu_memory_utilization=0.35, GSM8K's prompts: 82.6 tokens on average): the fullest GPU of each run.
MEASURED_H200 = [  # recipe, GPUs, (rollout.n, mini-batch prompts, micro-batch rows, response), reference, critic,
    # actor.expandable_segments, GiB
    ("grpo", 2, (5, 32, 32, 1024), True, False, False, 135.7),  # results/scale/grpo_qwen3-8b_2gpu_{torchrun,ray}.json
    ("rloo", 2, (5, 32, 32, 1024), True, False, False, 135.7),  # results/scale/rloo_qwen3-8b_2gpu_ray.json
    ("remax", 2, (4, 32, 32, 1024), True, False, False, 133.9),  # results/scale/remax_qwen3-8b_2gpu_torchrun.json
    ("dapo", 2, (16, 8, 16, 2048), False, False, False, 110.9),  # results/scale/dapo_qwen3-8b_2gpu_torchrun.json
    ("grpo", 4, (5, 64, 32, 1024), True, False, False, 90.0),
    ("ppo", 4, (1, 256, 16, 1024), False, True, False, 96.3),
    # results/scale/logs/grpo_qwen3-8b_2gpu_torchrun_expandable_segments.suite.log
    ("grpo", 2, (5, 32, 32, 1024), True, False, True, 114.5),
]


@pytest.mark.parametrize("recipe, gpus, batch, reference, critic, expandable, measured", MEASURED_H200)
def test_estimate_within_5_points_of_the_measured_peak(recipe, gpus, batch, reference, critic, expandable, measured):
    n, mini, micro, response = batch
    settings = OmegaConf.merge(config(ppo_mini_batch_size=mini, micro_batch_size=micro, expandable_segments=expandable),
                               {"rollout": {"n": n, "gpu_memory_utilization": 0.35},
                                "data": {"max_response_length": response}})
    found = per_gpu_memory(settings, ModelShape.from_pretrained(str(QWEN3_8B)), PARAMS, gpus, 140.4 * GIB,
                           with_reference=reference, with_critic=critic, prompt_tokens=82.6)
    assert abs(found["peak"] / GIB - measured) / 140.4 <= 0.05


def test_expandable_segments_count_no_cached_blocks():
    """Hand check: the same GRPO 2-GPU row with and without actor.expandable_segments differs by exactly the
    1.6 cached sets of token-sized activations in the update, and the peak moves to generation."""
    shape = ModelShape.from_pretrained(str(QWEN3_8B))
    found = {on: per_gpu_memory(OmegaConf.merge(config(ppo_mini_batch_size=32, micro_batch_size=32,
                                                       expandable_segments=on),
                                                {"rollout": {"n": 5, "gpu_memory_utilization": 0.35},
                                                 "data": {"max_response_length": 1024}}),
                                shape, PARAMS, 2, 140.4 * GIB, with_reference=True, with_critic=False,
                                prompt_tokens=82.6) for on in (False, True)}
    sets = found[False]["activations"]["layer_inputs"] + found[False]["activations"]["layer_internals"]
    assert found[False]["allocator_cache"] == pytest.approx(1.6 * sets) and found[True]["allocator_cache"] == 0
    assert found[True]["training_peak"] == found[True]["training_allocated"] == found[False]["training_allocated"]
    assert found[True]["peak"] == found[True]["generation_peak"] < found[False]["peak"] == found[False]["training_peak"]
    limit = 120 * GIB  # the largest micro-batch within a limit: the cached sets no longer divide the room
    per_token = sets / found[False]["micro_batch_tokens"]
    fixed = found[False]["training_allocated"] - sets
    assert micro_batch_tokens_within(found[True], limit, cached=True) == int((limit - fixed) / per_token)
    assert micro_batch_tokens_within(found[False], limit, cached=True) == int((limit - fixed) / (per_token * 2.6))


@pytest.fixture(scope="module")
def gsm8k_parquet(tmp_path_factory):
    if not (GSM8K_JSONL / "test.jsonl").exists():
        pytest.skip(f"{GSM8K_JSONL} is not here")
    out = tmp_path_factory.mktemp("gsm8k")
    for split in ("train", "test"):  # the test split stands in for both: the plan only counts rows
        subprocess.run([sys.executable, "-m", "core.cli", "data", "gsm8k", "--local", str(GSM8K_JSONL / "test.jsonl"),
                        "--split", split, "--out", str(out)], cwd=ROOT, check=True, capture_output=True)
    return out


def test_plan_runs_both_scripts_at_8_gpus_under_both_controllers(gsm8k_parquet, tmp_path):
    from bench.scale.plan import main

    out = tmp_path / "out"
    main(["--recipes", "dapo", "grpo", "--gpus", "--full-gpus", "8", "--data", str(gsm8k_parquet),
          "--work", str(tmp_path / "work"), "--out", str(out)])
    plans = {p.name: json.loads(p.read_text()) for p in out.glob("plan_*.json")}
    assert sorted(plans) == [f"plan_{r}_qwen3-8b_8gpu_{c}.json" for r in ("dapo", "grpo") for c in ("ray", "torchrun")]
    dapo = plans["plan_dapo_qwen3-8b_8gpu_torchrun.json"]
    assert dapo["settings"] == "script" and "NGPUS=8" in dapo["command"] and "--dry-run" in dapo["command"]
    assert dapo["plan"]["batch"]["prompts_per_step"] == 512 and dapo["plan"]["rollout"]["n"] == 16
    assert dapo["plan"]["lengths"] == {"prompt": 512, "response": 2048}
    assert dapo["plan"]["batch"]["sequences_per_mini_batch_per_device"] == 64
    assert "1 node × 8 GPUs = 8 GPUs" in dapo["plan_text"]
    h100 = dapo["memory_per_gpu"]["H100 80GB"]
    assert h100["state_gib"]["weights"] == round(4 * PARAMS / 8 / GIB, 2) and h100["fits"]
    assert 80 < dapo["mean_prompt_tokens"] < 120  # GSM8K's chat-templated questions, far below 512
    grpo = plans["plan_grpo_qwen3-8b_8gpu_ray.json"]
    assert grpo["controller"] == "ray" and "trainer.controller=ray" in grpo["command"]
    assert grpo["plan"]["batch"]["prompts_per_step"] == 1024 and grpo["plan"]["rollout"]["n"] == 5
    assert grpo["memory_per_gpu"]["H100 80GB"]["state_gib"]["reference"] > 0  # GRPO's KL loss needs the reference


@pytest.mark.parametrize("given", [["--tag", "expandable", "actor.expandable_segments=true"], []],
                         ids=["tagged", "the-suite-default"])
def test_plan_of_a_tagged_suite_run_has_its_overrides_name_and_settings(given, gsm8k_parquet, tmp_path):
    """A plan made with `--tag expandable actor.expandable_segments=true`, as the runs were before expandable
    segments became the scaled settings' default, and one made with neither: the same plan."""
    from bench.scale.plan import main

    out = tmp_path / "out"
    main(["--recipes", "grpo", "--controllers", "torchrun", "--gpus", "2", "--full-gpus", "--data", str(gsm8k_parquet),
          "--work", str(tmp_path / "work"), "--out", str(out), *given])
    (path,) = out.glob("plan_*.json")
    plan = json.loads(path.read_text())
    assert path.name == "plan_grpo_qwen3-8b_2gpu_torchrun_expandable.json"
    assert plan["settings"] == "scaled + actor.expandable_segments=true"
    assert plan["command"].endswith("actor.expandable_segments=true")
    assert plan["memory_per_gpu"]["H200 141GB"]["allocator_cache_gib"] == 0  # no cached blocks are counted


def test_report_sets_each_measured_run_beside_the_plan_of_its_settings(tmp_path):
    """The ReMax runs on 2 H200s with and without expandable segments: each beside its own plan (the plain plan
    counts the allocator's cached blocks, the tagged one does not)."""
    from bench.scale.report import build_readme

    for name in ("remax_qwen3-8b_2gpu_torchrun.json", "remax_qwen3-8b_2gpu_torchrun_expandable.json",
                 "plan_remax_qwen3-8b_2gpu_torchrun.json", "plan_remax_qwen3-8b_2gpu_torchrun_expandable.json"):
        shutil.copy(ROOT / "results/scale" / name, tmp_path / name)
    text = build_readme(tmp_path)
    assert "| remax | 2 | torchrun | scaled | H200 141GB | 133.9 / 124.2 | 95.4% | 130.1 | 92.6% | -2.7 |" in text
    assert ("| remax | 2 | torchrun | scaled + actor.expandable_segments=true | H200 141GB | 114.5 / 114.5 | 81.6% "
            "| 113.6 | 80.9% | -0.7 |") in text


def test_report_renders_the_plan_and_verl_sections_from_committed_json(tmp_path):
    from bench.scale.report import build_readme

    for name in ("plan_dapo_qwen3-8b_8gpu_torchrun.json", "plan_grpo_qwen3-8b_8gpu_torchrun.json"):
        shutil.copy(ROOT / "results/scale" / name, tmp_path / name)
    dapo = json.loads((tmp_path / "plan_dapo_qwen3-8b_8gpu_torchrun.json").read_text())
    text = build_readme(tmp_path)
    assert "No results yet" in text  # a plan is not a measured run
    assert "| dapo | 8 | torchrun | script | 512 × 16 | 64 | 16 × 4 |" in text
    assert f"{dapo['memory_per_gpu']['H100 80GB']['peak_fraction']:.0%} (fits ≤ 95%)" in text
    # verl's published steps 2-4 and 6-9: step times 172.797 … 167.295 s, median 168.591.
    assert "| verl, published (steps 2, 3, 4, 6, 7, 8, 9) | 8 | 168.6 | 42.8 | 74.7 | 1087 |" in text
    assert "| ours, recipes/grpo/run_qwen3_8b.sh | 8 | not run yet |" in text


def test_report_scaling_compares_8_with_2_gpus():
    from bench.scale.report import scaling

    def run(gpus, generated, trained):
        return {"recipe": "dapo", "controller": "ray", "gpus": gpus, "generated_tokens_per_s_per_gpu": generated,
                "trained_tokens_per_s_per_gpu": trained}

    lines = scaling([run(2, 1000.0, 2000.0), run(8, 900.0, 1500.0)])
    assert "| dapo | ray | 900 ÷ 1000 = 90% | 1500 ÷ 2000 = 75% |" in lines
    assert scaling([run(2, 1000.0, 2000.0)]) == []


def test_report_coverage_counts_runs_and_names_the_missing_cells():
    from bench.scale.report import coverage

    def run(recipe, gpus, controller, step_s):
        return {"recipe": recipe, "gpus": gpus, "controller": controller, "median_step_s": step_s}

    lines = coverage([run("grpo", 2, "torchrun", 45.5), run("grpo", 2, "torchrun", 46.1), run("grpo", 2, "ray", None),
                      run("dapo", 4, "ray", 70.04)])
    assert "| grpo | 2 runs, 45.5 s | 1 run, step 1 only | – | – |" in lines
    assert "| dapo | – | – | – | 1 run, 70.0 s |" in lines
    assert "| ppo | – | – | – | – |" in lines


def test_plan_json_needs_dry_run(capsys):
    from core.cli import main

    assert main(["train", "--recipe", "grpo", "--plan-json", "plan.json"]) == 2
    assert "--plan-json writes a dry run's plan: add --dry-run" in capsys.readouterr().err
