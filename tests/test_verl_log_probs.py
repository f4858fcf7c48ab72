"""bench/verl/log_probs.py on CPU: verl 0.9.1's actor worker, through its padded path (no flash-attn here) in fp32,
gives the tiny model's own log-softmax of the saved batch's responses (skipped where verl is not importable)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # by file: verl's wheel installs a top-level `tests` package of its own

from helpers_policy import sampled_batch, tiny_policy  # noqa: E402

from core.data.batch_file import save_batch  # noqa: E402
from core.models.tiny import build_tiny_tokenizer  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("verl") is None or importlib.util.find_spec("ray") is None,
    reason="verl is installed in its own environment (bench/requirements-verl.txt): $VERL_PY -m pytest this file")


def test_verls_actor_gives_the_models_own_log_softmax_of_the_responses(tmp_path):
    tokenizer = build_tiny_tokenizer()
    model = tiny_policy(tokenizer)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")  # verl's model config loads it
    batch = sampled_batch(model, tokenizer, tmp_path, prompts=3, n=2, max_new_tokens=10)
    end_early(batch, row=0, length=4)  # the tiny model rarely samples its end token
    batch.tensors["token_level_rewards"] = torch.zeros(batch["response_mask"].shape)
    batch.non_tensors["uid"] = np.array([str(row // 2) for row in range(len(batch))], dtype=object)
    save_batch(batch, tmp_path / "batch.pt")
    done = subprocess.run([sys.executable, "-m", "bench.verl.log_probs", "--batch", str(tmp_path / "batch.pt"),
                           "--model-dir", str(tmp_path / "model"), "--shape", "dapo8b", "--packing", "off", "--fp32",
                           "--out", str(tmp_path / "verl.pt")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    verl = torch.load(tmp_path / "verl.pt", weights_only=True)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits
    width, mask = batch["responses"].shape[1], batch["response_mask"]
    naive = torch.log_softmax(logits[:, -width - 1:-1].float(), -1).gather(-1, batch["responses"][..., None])[..., 0]
    assert verl.shape == mask.shape
    torch.testing.assert_close(verl, naive * mask, rtol=1e-5, atol=1e-5)
    assert mask[0].sum() == 4 and verl[0, 4:].eq(0).all()


def end_early(batch, row: int, length: int) -> None:
    """Make `row`'s response `length` tokens long, right-padded as the rollout pads one that ended, so that the
    scatter back to (B, T_resp) (verl's no_padding_2_padding) is checked on a short row too."""
    pad = batch["input_ids"].shape[1] - batch["responses"].shape[1] + length
    for key in ("input_ids", "attention_mask"):
        batch[key][row, pad:] = 0
    for key in ("responses", "response_mask"):
        batch[key][row, length:] = 0
