"""test_training.py - a tiny GPT (python/train/train_gpt.py --tiny) trained for a few steps on the CPU with PyTorch's
attention and with the suite's, from one seed: the loss falls, and the two validation curves agree far more
closely than two seeds of PyTorch's own attention do (float32: phase 3 + phase 4; bf16: phase 5's CPU twins)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train"))
import train_gpt  # noqa: E402


@pytest.mark.parametrize("dtype, closeness", [("fp32", 1e-4), ("bf16", 2e-3)])
def test_tiny_training(tmp_path, dtype, closeness):
    runs = [f"sdpa:{dtype}:1", f"suite:{dtype}:1", f"sdpa:{dtype}:2"]
    rows, summaries = train_gpt.main(["--tiny", "--device", "cpu", "--out", str(tmp_path), "--runs", *runs])
    assert (tmp_path / "training.csv").exists() and (tmp_path / "summary.csv").exists()
    suite = train_gpt.validation_curve(rows, f"suite:{dtype}:1")
    assert suite[max(suite)] < suite[0] - 0.3, "the loss did not fall"
    gap = train_gpt.largest_gap(rows, f"suite:{dtype}:1", f"sdpa:{dtype}:1")
    noise = train_gpt.largest_gap(rows, f"sdpa:{dtype}:1", f"sdpa:{dtype}:2")
    assert gap <= closeness < noise, f"gap to PyTorch {gap:.3g}, two seeds of PyTorch {noise:.3g}"
