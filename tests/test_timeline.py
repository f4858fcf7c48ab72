"""The per-step timeline (core/trainer/timeline.py): which devices each role's spans are on, and a device's busy
seconds and share, by hand on made-up spans."""

from types import SimpleNamespace

import pytest
import torch

from core.trainer.timeline import Timeline, busy_seconds, busy_shares, device_labels


def span(start, end, *devices, stage="update_actor"):
    return {"role": "train", "stage": stage, "step": 1, "start": start, "end": end, "devices": list(devices)}


def test_overlapping_spans_on_a_device_count_once_and_are_clipped_to_the_window():
    spans = [span(0.0, 4.0, "cuda:0"), span(3.0, 6.0, "cuda:0", stage="generate"),  # 0..6 busy: 6 s, not 7
             span(8.0, 12.0, "cuda:0"), span(1.0, 2.0, "cuda:1")]
    assert busy_seconds(spans, "cuda:0", (0.0, 10.0)) == pytest.approx(6.0 + 2.0)  # 8..12 clipped at 10
    assert busy_seconds(spans, "cuda:0", (5.0, 9.0)) == pytest.approx(1.0 + 1.0)
    assert busy_seconds(spans, "cuda:1", (0.0, 10.0)) == pytest.approx(1.0)
    assert busy_seconds(spans, "cuda:1", (2.0, 10.0)) == 0.0


def test_busy_share_is_busy_seconds_over_the_steps_wall_seconds():
    timeline = {"devices": ["cuda:0", "cuda:1", "host"],
                "steps": [{"step": 1, "start": 0.0, "end": 10.0}, {"step": 2, "start": 10.0, "end": 14.0}],
                "spans": [span(0.0, 9.0, "cuda:0"), span(10.0, 13.0, "cuda:0", "cuda:1"), span(0.0, 14.0, "host")]}
    # Step 2 alone: cuda:0 3 of 4 s, cuda:1 3 of 4 s. Steps 1-2: cuda:0 (9 + 3) / 14, cuda:1 3 / 14.
    assert busy_shares(timeline, [2]) == pytest.approx({"cuda:0": 0.75, "cuda:1": 0.75})
    assert busy_shares(timeline, [1, 2]) == pytest.approx({"cuda:0": 12 / 14, "cuda:1": 3 / 14})


def test_each_controller_names_the_devices_of_training_and_rollout():
    rank1 = SimpleNamespace(rank=1, device=torch.device("cuda", 1))
    assert device_labels(rank1, object()) == (["cuda:1"], ["cuda:1"])  # a torchrun rank holds both roles
    cpu_rank = SimpleNamespace(rank=1, device=torch.device("cpu"))
    assert device_labels(cpu_rank, object()) == (["cpu:1"], ["cpu:1"])
    colocated = SimpleNamespace(num_workers=2, gpus=1)
    assert device_labels(None, colocated) == (["cuda:0", "cuda:1"], ["cuda:0", "cuda:1"])
    disaggregated = SimpleNamespace(num_workers=3, gpus=1, rollout_workers=["w0"])  # 1 + 3
    assert device_labels(None, disaggregated) == (["cuda:0", "cuda:1", "cuda:2"], ["cuda:3"])


def test_a_weight_sync_spans_both_pools_and_host_stages_no_device():
    timeline = Timeline(None, SimpleNamespace(num_workers=1, gpus=0, rollout_workers=["w0"]))
    with timeline.step(1):
        with timeline.stage("gen"):  # a wait for the rollout: its work is the rollout's own span
            with timeline.span("generate", "rollout"):
                pass
        with timeline.stage("reward"), timeline.stage("update_actor"):
            pass
        with timeline.stage("sync_weights"), timeline.span("sync_weights", "sync"):
            pass
    assert [(s["stage"], s["devices"]) for s in timeline.spans] == [
        ("generate", ["cpu:1"]), ("update_actor", ["cpu:0"]), ("reward", ["host"]),
        ("sync_weights", ["cpu:0", "cpu:1"])]
    assert [s["step"] for s in timeline.spans] == [1, 1, 1, 1] and timeline.steps[0]["step"] == 1
