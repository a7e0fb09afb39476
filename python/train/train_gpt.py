#!/usr/bin/env python3
"""train_gpt.py - a small character-level GPT trained with PyTorch's attention and with the suite's, side by side.

    python3 python/train/train_gpt.py --out DIR                    # the H100 comparison (python/train/h100.sh)
    python3 python/train/train_gpt.py --tiny --device cpu --out DIR  # a few steps of a tiny model on the CPU

Every run trains the same model (6 layers, 6 heads of 64, 384 wide, 256 characters of context by default) on the
generated corpus (corpus.py) for the same steps; a run is attention:dtype:seed, where attention is
  sdpa   torch.nn.functional.scaled_dot_product_attention (whichever backend PyTorch picks)
  suite  flash_steps.scaled_dot_product_attention: float32 is phase 3 step 3 + phase 4, bf16 is phase 5 (steps 3, 4)
and dtype is fp32 (TF32 matmuls outside attention, the same in every run) or bf16 (autocast). The seed fixes the
initial weights and the order of the batches, so sdpa:fp32:1 and suite:fp32:1 differ only in their attention;
sdpa:fp32:2 is the yardstick: how far two runs of PyTorch's own attention land apart when only the seed changes.

Writes DIR/training.csv (one row per step: losses, milliseconds), DIR/summary.csv (one row per run: final
validation loss, tokens per second, the largest gap to the same-seed sdpa run) and prints the comparison.
python/train/plot_training.py draws the figure from training.csv.
"""
import argparse
import csv
import math
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import flash_steps  # noqa: E402
from corpus import generate  # noqa: E402

DEFAULT_RUNS = ["sdpa:fp32:1", "sdpa:fp32:2", "suite:fp32:1", "sdpa:bf16:1", "sdpa:bf16:2", "suite:bf16:1"]
FULL = dict(layers=6, heads=6, width=384, block=256, batch=32, steps=600, eval_every=50, eval_batches=8,
            corpus_chars=1_000_000, lr=1e-3, warmup=30)
TINY = dict(layers=2, heads=2, width=64, block=48, batch=4, steps=8, eval_every=4, eval_batches=2,
            corpus_chars=20_000, lr=3e-3, warmup=2)
VALIDATION_SEED = 99   # the validation batches are the same in every run
TIMING_SKIP = 10       # the first steps (allocator and kernel warm-up) are left out of tokens per second


class Block(torch.nn.Module):
    def __init__(self, width, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x):
        B, T, C = x.shape
        # [B, T, 3, heads, D] seen as three [B, heads, T, D] views: no copy, the kernels take the strides
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = self.attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, vocab, layers, heads, width, block, attention):
        super().__init__()
        self.token, self.position = torch.nn.Embedding(vocab, width), torch.nn.Embedding(block, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads, attention) for _ in range(layers))
        self.ln, self.head = torch.nn.LayerNorm(width), torch.nn.Linear(width, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.token(idx) + self.position(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


ATTENTION = {"sdpa": F.scaled_dot_product_attention, "suite": flash_steps.scaled_dot_product_attention}


def batches(data, block, batch, generator, device):
    starts = torch.randint(len(data) - block - 1, (batch,), generator=generator)
    x = torch.stack([data[s:s + block] for s in starts])
    y = torch.stack([data[s + 1:s + block + 1] for s in starts])
    return x.to(device), y.to(device)


def learning_rate(step, cfg):
    """Linear warm-up, then a cosine down to a tenth."""
    if step < cfg["warmup"]:
        return cfg["lr"] * (step + 1) / cfg["warmup"]
    progress = (step - cfg["warmup"]) / max(1, cfg["steps"] - cfg["warmup"])
    return cfg["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(run, cfg, data, vocab, device, rows):
    """Trains one run; appends its per-step rows; returns its summary."""
    attention, dtype, seed = run.split(":")
    train_data, val_data = data
    torch.manual_seed(int(seed))
    model = GPT(vocab, cfg["layers"], cfg["heads"], cfg["width"], cfg["block"], ATTENTION[attention]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.99), weight_decay=0.1)
    train_gen = torch.Generator().manual_seed(int(seed))
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")

    def validation_loss():
        gen = torch.Generator().manual_seed(VALIDATION_SEED)
        model.eval()
        with torch.no_grad(), autocast:
            losses = [model(*batches(val_data, cfg["block"], cfg["batch"], gen, device)).item()
                      for _ in range(cfg["eval_batches"])]
        model.train()
        return sum(losses) / len(losses)

    step_ms = []
    for step in range(cfg["steps"] + 1):
        val = validation_loss() if step % cfg["eval_every"] == 0 or step == cfg["steps"] else None
        train_loss, ms = None, None
        if step < cfg["steps"]:
            x, y = batches(train_data, cfg["block"], cfg["batch"], train_gen, device)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, cfg)
            synchronize(device)
            start = time.perf_counter()
            with autocast:
                loss = model(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            synchronize(device)
            ms = 1e3 * (time.perf_counter() - start)
            train_loss = loss.item()
            if step >= min(TIMING_SKIP, cfg["steps"] // 2):
                step_ms.append(ms)
        rows.append({"run": run, "attention": attention, "dtype": dtype, "seed": seed, "step": step,
                     "train_loss": "" if train_loss is None else f"{train_loss:.6f}",
                     "val_loss": "" if val is None else f"{val:.6f}", "step_ms": "" if ms is None else f"{ms:.3f}"})
        if val is not None:
            print(f"  {run:14s} step {step:5d}  val loss {val:.4f}", flush=True)
    tokens_per_s = cfg["batch"] * cfg["block"] / (statistics.median(step_ms) / 1e3)
    probe = torch.empty(1, cfg["heads"], 1, cfg["width"] // cfg["heads"], device=device,
                        dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
    kernel = flash_steps.kernel_name(probe, probe, probe, causal=True) if attention == "suite" else "torch sdpa"
    return {"run": run, "attention": attention, "dtype": dtype, "seed": seed, "kernel": kernel,
            "final_val_loss": val, "tokens_per_s": tokens_per_s}


def validation_curve(rows, run):
    return {r["step"]: float(r["val_loss"]) for r in rows if r["run"] == run and r["val_loss"] != ""}


def largest_gap(rows, run_a, run_b):
    a, b = validation_curve(rows, run_a), validation_curve(rows, run_b)
    common = sorted(set(a) & set(b))
    return max(abs(a[s] - b[s]) for s in common) if common else float("nan")


def machine(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with open("/proc/cpuinfo") as f:
        models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return f"{models[0] if models else platform.processor()} ({os.cpu_count()} cores)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for training.csv and summary.csv")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny model for a few steps (the CPU test)")
    parser.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, help="attention:dtype:seed, e.g. suite:fp32:1")
    parser.add_argument("--steps", type=int, help="training steps (default 600, tiny 8)")
    args = parser.parse_args(argv)
    cfg = dict(TINY if args.tiny else FULL)
    if args.steps:
        cfg["steps"] = args.steps
    for run in args.runs:
        parts = run.split(":")
        if len(parts) != 3 or parts[0] not in ATTENTION or parts[1] not in ("fp32", "bf16") or not parts[2].isdigit():
            parser.error(f"a run is attention:dtype:seed with attention sdpa or suite, dtype fp32 or bf16 (got {run})")
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True   # the projections and the MLP; attention is the kernels' own
    text = generate(cfg["corpus_chars"])
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    split = int(0.9 * len(data))
    print(f"{machine(device)}: {len(text)} characters, vocabulary {len(chars)}, {cfg['steps']} steps of "
          f"{cfg['batch']} x {cfg['block']} tokens, {cfg['layers']} layers, {cfg['heads']} heads, width "
          f"{cfg['width']}", flush=True)
    rows, summaries = [], []
    for run in args.runs:
        summaries.append(train(run, cfg, (data[:split], data[split:]), len(chars), device, rows))
    for s in summaries:
        same_seed_sdpa = f"sdpa:{s['dtype']}:{s['seed']}"
        s["max_gap_to_same_seed_sdpa"] = (largest_gap(rows, s["run"], same_seed_sdpa)
                                          if s["attention"] == "suite" and same_seed_sdpa in args.runs else "")
        s["machine"] = machine(device)
    os.makedirs(args.out, exist_ok=True)
    for name, table in (("training.csv", rows), ("summary.csv", summaries)):
        with open(os.path.join(args.out, name), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    print(f"\n{'run':14s} {'kernel':42s} {'final val loss':>14s} {'tokens/s':>10s} {'gap to sdpa':>11s}")
    for s in summaries:
        gap = s["max_gap_to_same_seed_sdpa"]
        print(f"{s['run']:14s} {s['kernel']:42s} {s['final_val_loss']:14.4f} {s['tokens_per_s']:10.0f} "
              f"{gap if gap == '' else f'{gap:.2e}':>11s}")
    for dtype in ("fp32", "bf16"):
        runs = {s["run"] for s in summaries}
        if {f"sdpa:{dtype}:1", f"sdpa:{dtype}:2", f"suite:{dtype}:1"} <= runs:
            noise = largest_gap(rows, f"sdpa:{dtype}:1", f"sdpa:{dtype}:2")
            gap = largest_gap(rows, f"suite:{dtype}:1", f"sdpa:{dtype}:1")
            print(f"{dtype}: the suite's validation curve is at most {gap:.2e} from PyTorch's (same seed); PyTorch's "
                  f"own two seeds are up to {noise:.2e} apart: {'within' if gap <= noise else 'OUTSIDE'} the noise")
    return rows, summaries


if __name__ == "__main__":
    main()
