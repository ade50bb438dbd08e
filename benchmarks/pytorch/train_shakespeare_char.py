#!/usr/bin/python3
"""PyTorch reference for mixprec-train: nanoGPT's shakespeare_char CPU recipe, written from the recipe.

The recipe (docs: ../shared/docs/TRAINING.md section 4; this is an independent implementation, not nanoGPT's
code): a character GPT with 4 layers, 4 heads, n_embd 128, context 64, batch 12, no biases, no dropout,
tied token embedding / classifier, exact (erf) GELU, LayerNorm eps 1e-5 with a weight and no bias; init
N(0, 0.02) everywhere except the two residual out-projections of each block (attention output and MLP
output), N(0, 0.02 / sqrt(2 * n_layer)); AdamW betas (0.9, 0.99), eps 1e-8, weight decay 0.1 on parameters
of rank >= 2 only; global-norm gradient clipping at 1.0; learning rate 1e-3 with 100 linear warm-up
iterations and cosine decay to 1e-4 at iteration 2000; iterations 0..iters inclusive (iters + 1 updates).

Data: data/tinyshakespeare/input.txt; vocabulary = the sorted distinct characters (65); the first
int(0.9 n) characters train, the rest validation. A training batch is 12 random windows
i ~ U[0, len - 64) drawn with torch.randint from torch's global generator (torch.manual_seed(--seed)),
x = d[i:i+64], y = d[i+1:i+65].

Precision: --precision f32 runs everything in float32; --precision bf16 wraps forward + loss in
torch.autocast("cpu", dtype=torch.bfloat16) (parameters, gradients and optimizer state stay float32;
no loss scaling, so skipped_steps is always 0). Evaluations run under the same context as training.

Output, last line (the form mixprec-train prints):
  final policy=<f32|autocast-bf16> iters=<n> train_loss=<x> val_loss=<x> tokens_per_s=<x> skipped_steps=0
  - val_loss: mean cross-entropy over ALL non-overlapping 64-character windows of the validation split
    (i = 0, 64, 128, ... with i + 65 <= len: 1742 windows, 111,488 targets).
  - train_loss: mean cross-entropy over a FIXED sample of 200 batches (12 x 64) of the train split, drawn
    from a torch.Generator seeded with 0 (the same windows for every run and seed). The mean training loss
    of the last 100 iterations is printed on the line before, for information.
  - tokens_per_s: 12 * 64 * (iters + 1) / training wall time; the wall time sums the iterations (batch
    draw, forward, backward, clip, step) and excludes every evaluation.
"""

import argparse
import contextlib
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

N_LAYER, N_HEAD, N_EMBD, BLOCK, BATCH = 4, 4, 128, 64, 12
LR, MIN_LR, WARMUP, LR_DECAY_ITERS = 1e-3, 1e-4, 100, 2000
BETAS, ADAM_EPS, WEIGHT_DECAY, GRAD_CLIP = (0.9, 0.99), 1e-8, 0.1, 1.0
LN_EPS, INIT_STD = 1e-5, 0.02
TRAIN_SAMPLE_BATCHES, TRAIN_SAMPLE_SEED = 200, 0


class WeightOnlyLayerNorm(nn.Module):
    """LayerNorm over the last dimension with a learned scale and no bias (PyTorch 1.13's nn.LayerNorm
    cannot drop the bias)."""

    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, None, LN_EPS)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one fused [C -> 3C] projection for q, k, v, then [C -> C]."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(N_EMBD, 3 * N_EMBD, bias=False)
        self.out = nn.Linear(N_EMBD, N_EMBD, bias=False)  # residual out-projection (scaled init)
        mask = torch.tril(torch.ones(BLOCK, BLOCK, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, BLOCK, BLOCK), persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        hd = c // N_HEAD
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, N_HEAD, hd).transpose(1, 2)  # [B, H, T, hd]
        k = k.view(b, t, N_HEAD, hd).transpose(1, 2)
        v = v.view(b, t, N_HEAD, hd).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # [B, H, T, T]
        scores = scores.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        probs = F.softmax(scores, dim=-1)
        y = (probs @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.out(y)


class FeedForward(nn.Module):
    """C -> 4C, exact GELU, 4C -> C."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(N_EMBD, 4 * N_EMBD, bias=False)
        self.down = nn.Linear(4 * N_EMBD, N_EMBD, bias=False)  # residual out-projection (scaled init)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))  # approximate='none': erf GELU


class Block(nn.Module):
    """Pre-norm transformer block: x += attn(ln1(x)); x += mlp(ln2(x))."""

    def __init__(self):
        super().__init__()
        self.ln1 = WeightOnlyLayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln2 = WeightOnlyLayerNorm(N_EMBD)
        self.mlp = FeedForward()

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    """Token + learned position embeddings, N_LAYER blocks, final LayerNorm, classifier tied to the token
    embedding."""

    def __init__(self, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, N_EMBD)
        self.pos = nn.Embedding(BLOCK, N_EMBD)
        self.blocks = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = WeightOnlyLayerNorm(N_EMBD)
        self.head = nn.Linear(N_EMBD, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    module.weight.normal_(0.0, INIT_STD)
            residual_std = INIT_STD / math.sqrt(2 * N_LAYER)
            for block in self.blocks:
                block.attn.out.weight.normal_(0.0, residual_std)
                block.mlp.down.weight.normal_(0.0, residual_std)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, dtype=torch.long))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))  # [B, T, vocab]


def lr_at(it):
    """Linear warm-up over WARMUP iterations ((it + 1) / (WARMUP + 1) of LR), cosine decay to MIN_LR at
    LR_DECAY_ITERS, MIN_LR after."""
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    if it > LR_DECAY_ITERS:
        return MIN_LR
    ratio = (it - WARMUP) / (LR_DECAY_ITERS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def load_data(path):
    with open(path, "rb") as f:
        raw = f.read()
    if not raw:
        sys.exit(f"error: {path} is empty")
    vocab = sorted(set(raw))  # distinct bytes (tinyshakespeare is ASCII: bytes = characters)
    index = {b: i for i, b in enumerate(vocab)}
    ids = torch.tensor([index[b] for b in raw], dtype=torch.long)
    n_train = int(0.9 * len(ids))
    return vocab, ids[:n_train], ids[n_train:]


def random_batch(split, generator=None):
    starts = torch.randint(len(split) - BLOCK, (BATCH,), generator=generator)
    x = torch.stack([split[i : i + BLOCK] for i in starts.tolist()])
    y = torch.stack([split[i + 1 : i + 1 + BLOCK] for i in starts.tolist()])
    return x, y


def windows_loss(model, ctx, batches):
    """Mean cross-entropy over every target of `batches` (float64 sum of float32 per-batch sums)."""
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for x, y in batches:
            with ctx():
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="sum")
            total += loss.item()
            count += y.numel()
    model.train()
    return total / count


def val_windows(split):
    """Non-overlapping 64-character windows i = 0, 64, ... with i + 65 <= len, in batches of BATCH."""
    starts = list(range(0, len(split) - BLOCK, BLOCK))  # i + BLOCK + 1 <= len  <=>  i < len - BLOCK
    for k in range(0, len(starts), BATCH):
        chunk = starts[k : k + BATCH]
        x = torch.stack([split[i : i + BLOCK] for i in chunk])
        y = torch.stack([split[i + 1 : i + 1 + BLOCK] for i in chunk])
        yield x, y


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_data = os.path.join(here, "..", "..", "data", "tinyshakespeare", "input.txt")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=2000, help="last iteration; iterations 0..iters run (default 2000)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32", help="bf16 = CPU autocast to bfloat16")
    ap.add_argument("--seed", type=int, default=1337, help="torch.manual_seed (default 1337)")
    ap.add_argument("--eval-every", type=int, default=250,
                    help="print a 20-batch train/val estimate at every multiple (0: never; default 250)")
    ap.add_argument("--data", default=default_data, help="text file (default: the repo's tinyshakespeare)")
    ap.add_argument("--profile", metavar="FILE",
                    help="time the training steps with torch.profiler (CPU, evaluations excluded) and write "
                         "key_averages() sorted by self CPU time to FILE (printed too)")
    args = ap.parse_args()
    if args.iters < 1 or args.threads < 1:
        ap.error("--iters and --threads must be at least 1")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    vocab, train_ids, val_ids = load_data(args.data)
    model = CharGPT(len(vocab))
    params = [p for p in model.parameters() if p.requires_grad]  # the tied weight once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=ADAM_EPS)
    if args.precision == "bf16":
        policy = "autocast-bf16"
        ctx = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    else:
        policy = "f32"
        ctx = contextlib.nullcontext
    n_params = sum(p.numel() for p in params)
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} policy={policy} vocab={len(vocab)} "
          f"train={len(train_ids)} val={len(val_ids)} params={n_params} (without wpe: {n_params - BLOCK * N_EMBD})",
          flush=True)

    eval_gen = torch.Generator().manual_seed(args.seed + 1)  # periodic estimates do not move the batch stream
    train_seconds = 0.0
    recent = []
    last_it, last_seconds = 0, 0.0
    prof = None
    if args.profile:
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.start()
    for it in range(args.iters + 1):
        if args.eval_every > 0 and (it % args.eval_every == 0 or it == args.iters):
            if prof is not None:
                ap.error("--profile needs --eval-every 0: the profiler cannot leave the evaluations out")
            tr = windows_loss(model, ctx, (random_batch(train_ids, eval_gen) for _ in range(20)))
            va = windows_loss(model, ctx, (random_batch(val_ids, eval_gen) for _ in range(20)))
            # The rate over the iterations since the last evaluation: on a shared machine, the spread of
            # these shows how much other load disturbed the run.
            rate = BATCH * BLOCK * (it - last_it) / (train_seconds - last_seconds) if it > last_it else 0.0
            last_it, last_seconds = it, train_seconds
            print(f"iter {it}: train {tr:.4f} val {va:.4f} (20-batch estimates) lr {lr_at(it):.3e} "
                  f"train_time {train_seconds:.1f}s interval_tokens_per_s {rate:.0f}", flush=True)
        t0 = time.perf_counter()
        with torch.profiler.record_function("train::step"):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(it)
            x, y = random_batch(train_ids)
            with ctx():
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        train_seconds += time.perf_counter() - t0
        recent.append(loss.item())
        recent = recent[-100:]

    updates = args.iters + 1
    tokens_per_s = BATCH * BLOCK * updates / train_seconds
    if prof is not None:
        prof.stop()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
        head = (f"# train_shakespeare_char.py --profile, policy {policy}\n\n{updates} steps of batch {BATCH} x block "
                f"{BLOCK}, {torch.get_num_threads()} threads: {1e3 * train_seconds / updates:.1f} ms per step (wall), "
                f"{tokens_per_s:.0f} tokens/s (profiler on). torch.profiler key_averages(), CPU time.\n\n")
        print(head + table, flush=True)
        with open(args.profile, "w", encoding="utf-8") as f:
            f.write(head + "```\n" + table + "\n```\n")
    sample_gen = torch.Generator().manual_seed(TRAIN_SAMPLE_SEED)
    train_loss = windows_loss(model, ctx, (random_batch(train_ids, sample_gen) for _ in range(TRAIN_SAMPLE_BATCHES)))
    val_loss = windows_loss(model, ctx, val_windows(val_ids))
    print(f"train_loss_last100={sum(recent) / len(recent):.4f} train_seconds={train_seconds:.1f} updates={updates}")
    print(f"final policy={policy} iters={args.iters} train_loss={train_loss:.4f} val_loss={val_loss:.4f} "
          f"tokens_per_s={tokens_per_s:.0f} skipped_steps=0", flush=True)


if __name__ == "__main__":
    main()
