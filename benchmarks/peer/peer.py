#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch CPU peer for attn's reference benchmarks (the cases of benchmarks/README.md).

Runs the reference models R1-R4 with plain PyTorch on the CPU and prints
samples/s (median of timed iterations after warm-ups) and the peak RSS of the
process that ran the case.  Every attention runs in up to four ways:

  hand  fused QKV Linear, matmul, masked softmax, matmul, output Linear
  mha   nn.MultiheadAttention(batch_first=True, need_weights=False)
  sdpa  fused QKV Linear + F.scaled_dot_product_attention + output Linear
        (torch >= 2.0 only; skipped with a note on older torch such as
        Debian's python3-torch 1.13)
  packed  both Linears on the real tokens only (x[valid]), padded rows zero,
        the attention core as sdpa (hand on older torch): attn's
        PaddedRows::zero, which changes nothing the masked pooling reads

R5 (local attention, a band of +-256 keys) runs hand and sdpa with the band as a
dense (T, T) mask, and `chunked`: the band in query blocks of 128 against their
128 + 2 * 256 keys, so O(T w) like attn's kernel.  R6 (a 4-layer pre-norm
encoder) runs torch.nn.TransformerEncoder (impl `mha`), with R6-ckpt through
torch.utils.checkpoint per layer.

Usage:
  peer.py --case R1-h8 --mode train --iters 20 --json   # one JSON line, best impl
  peer.py --case R3-T1024 --mode train --impl hand      # one impl, in-process
  peer.py --all [--json]                                # every case, table
  peer.py --gemm [--precision bf16]                     # FP32 (bf16) GEMM 2048^3 GFLOP/s
  peer.py --case R1-h8 --precision bf16                 # torch.autocast bf16 around forward
  peer.py --case R4-b64 --precision int8                # quantize_dynamic int8 (inference)
  peer.py --r4-lengths                                  # the R4 sample lengths
  peer.py --check                                       # hand == mha == sdpa == packed,
                                                        # R5's band three ways, R6-ckpt == R6

Works with torch 1.13 and 2.x.  Set OMP_NUM_THREADS before starting python
(run-peer.sh does); the child processes started here get it from --threads.
"""

import argparse
import contextlib
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import time

# ----------------------------------------------------------------------------
# Cases.  batch, T as in benchmarks/README.md; R4 lengths come from r4_lengths().
# ----------------------------------------------------------------------------

CASES = {
    "R1-h1": dict(model="R1", heads=1, batch=32, T=256),
    "R1-h8": dict(model="R1", heads=8, batch=32, T=256),
    "R2-h4": dict(model="R2", heads=4, batch=64, T=48),
    "R2-h8": dict(model="R2", heads=8, batch=64, T=48),
    "R2-gru-h4": dict(model="R2", heads=4, batch=64, T=48, rnn="gru"),   # R2 with nn.GRU for nn.LSTM
    "R3-T512": dict(model="R3", heads=8, batch=4, T=512),
    "R3-T1024": dict(model="R3", heads=8, batch=4, T=1024),
    "R3-T2048": dict(model="R3", heads=8, batch=4, T=2048),
    "R4-b1": dict(model="R4", heads=4, batch=1, T=None),
    "R4-b64": dict(model="R4", heads=4, batch=64, T=None),
    "R5-T1024": dict(model="R5", heads=8, batch=1, T=1024, window=256),
    "R5-T4096": dict(model="R5", heads=8, batch=1, T=4096, window=256),
    "R5-T16384": dict(model="R5", heads=8, batch=1, T=16384, window=256),
    "R6": dict(model="R6", heads=8, batch=4, T=2048, layers=4, ff=1024, checkpoint=False),
    "R6-ckpt": dict(model="R6", heads=8, batch=4, T=2048, layers=4, ff=1024, checkpoint=True),
}
MODES = {"R1": ("train", "infer"), "R2": ("train", "infer"),
         "R3": ("train", "infer"), "R4": ("infer",), "R5": ("train",), "R6": ("train",)}
# What --all runs, as benchmarks/README.md lists them: R1, R2 training steps, R3 and R5
# forward + backward, R4 inference.  --all-modes adds the other modes.
ALL_RUNS = ([(c, "train") for c in ("R1-h1", "R1-h8", "R2-h4", "R2-h8", "R2-gru-h4",
                                    "R3-T512", "R3-T1024", "R3-T2048")]
            + [("R4-b1", "infer"), ("R4-b64", "infer")]
            + [(c, "train") for c in ("R5-T1024", "R5-T4096", "R5-T16384")])
# Seconds per step on 2 cores: --all runs these only when --cases names them.
OPT_IN_RUNS = [("R6", "train"), ("R6-ckpt", "train")]
EXTRA_RUNS = [(c, "infer") for c in ("R1-h1", "R1-h8", "R2-h4", "R2-h8", "R2-gru-h4",
                                     "R3-T512", "R3-T1024", "R3-T2048")]
IMPLS = ("hand", "mha", "sdpa", "packed", "chunked")
# The impls that apply to a model: R5 has no padding (packed would be sdpa) and its
# band goes in as an attention mask (mha would be sdpa's math); chunked is R5's
# only.  R6 is torch.nn.TransformerEncoder, whose attention is nn.MultiheadAttention.
MODEL_IMPLS = {"R5": ("hand", "sdpa", "chunked"), "R6": ("mha",)}
DEFAULT_IMPLS = ("hand", "mha", "sdpa", "packed")
CHUNK = 128              # R5 chunked: queries per block
R5_DENSE_MAX_T = 4096    # R5 hand and sdpa (T x T work) above this only with --r5-dense

SEED = 1234
R4_SAMPLES = 64          # samples per R4 iteration (same set for b1 and b64)
R4_MU_SIGMA = (2.99, 0.45)   # log-normal: exp(mu + sigma^2/2) ~= 22
R4_MIN, R4_MAX = 2, 145


def r4_lengths(n=R4_SAMPLES, seed=SEED):
    """TNEWS-title-like lengths: round(lognormal(2.99, 0.45)) clipped to [2, 145].

    Python's random module is used (not torch) so that the list is the same on
    every torch version and can be reproduced elsewhere; --r4-lengths prints it.
    """
    rng = random.Random(seed)
    mu, sigma = R4_MU_SIGMA
    return [min(R4_MAX, max(R4_MIN, int(round(rng.lognormvariate(mu, sigma)))))
            for _ in range(n)]


def sdpa_available(torch):
    return hasattr(torch.nn.functional, "scaled_dot_product_attention")


def malloc_name():
    try:
        with open("/proc/self/maps") as f:
            return "jemalloc" if "libjemalloc" in f.read() else "glibc"
    except OSError:
        return "unknown"


def mem_available():
    """MemAvailable from /proc/meminfo in bytes, or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_mb():
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb():
    """The resident set now (Linux /proc/self/statm; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1024.0 * 1024.0)
    except (OSError, ValueError, IndexError):
        return 0.0


# ----------------------------------------------------------------------------
# Models (built lazily so that --help and --r4-lengths need no torch)
# ----------------------------------------------------------------------------

def build_modules(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Attention(nn.Module):
        """Attention<H, D>: fused QKV (Linear(D, 3D)), per-head softmax(QK^T/sqrt(dh)) V
        with key-padding mask, heads merged, output Linear(D, D).
        x: (B, T, D), valid: (B, T) bool (True = token).  Returns (B, T, D).
        With `window` w (R5): query i sees key j iff |i - j| <= w, and there is no
        key-padding mask (valid must be all True)."""

        def __init__(self, heads, dim, impl, window=None):
            super().__init__()
            assert dim % heads == 0
            self.heads, self.dim, self.impl, self.window = heads, dim, impl, window
            self.head_dim = dim // heads
            self._masks = {}
            if impl == "mha":
                self.mha = nn.MultiheadAttention(dim, heads, batch_first=True)
            else:
                self.in_proj = nn.Linear(dim, 3 * dim)
                self.out_proj = nn.Linear(dim, dim)
                nn.init.xavier_uniform_(self.in_proj.weight)
                nn.init.zeros_(self.in_proj.bias)

        def forward(self, x, valid):
            if self.impl == "mha":
                return self.mha(x, x, x, key_padding_mask=~valid, need_weights=False)[0]
            B, T, D = x.shape
            H, dh = self.heads, self.head_dim
            packed = self.impl == "packed" and not bool(valid.all())
            if packed:
                qkv = x.new_zeros(B, T, 3 * D)
                qkv[valid] = self.in_proj(x[valid])
            else:
                qkv = self.in_proj(x)
            qkv = qkv.view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]                      # (B, H, T, dh)
            if self.window is not None:
                o = self.local_core(q, k, v)
            elif self.impl == "sdpa" or (self.impl == "packed" and sdpa_available(torch)):
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=valid[:, None, None, :])
            else:
                o = self.core(q, k, v, valid)
            o = o.transpose(1, 2).reshape(B, T, D)
            if packed:
                y = x.new_zeros(B, T, D)
                y[valid] = self.out_proj(o[valid])
                return y
            return self.out_proj(o)

        def core(self, q, k, v, valid):
            # scale folded into q: T*dh multiplies instead of T*T
            s = torch.matmul(q * (1.0 / math.sqrt(self.head_dim)), k.transpose(-1, -2))  # (B,H,T,T)
            s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
            return torch.matmul(torch.softmax(s, dim=-1), v)     # (B, H, T, dh)

        def band(self, T):
            """(T, T) bool, True where |i - j| <= window (built once per T)."""
            if ("band", T) not in self._masks:
                i = torch.arange(T)
                self._masks[("band", T)] = (i[:, None] - i[None, :]).abs() <= self.window
            return self._masks[("band", T)]

        def local_core(self, q, k, v):
            if self.impl == "chunked":
                return self.chunked_core(q, k, v)
            band = self.band(q.shape[2])
            if self.impl == "sdpa":
                return F.scaled_dot_product_attention(q, k, v, attn_mask=band)
            s = torch.matmul(q * (1.0 / math.sqrt(self.head_dim)), k.transpose(-1, -2))
            s = s.masked_fill(~band, float("-inf"))
            return torch.matmul(torch.softmax(s, dim=-1), v)

        def chunked_core(self, q, k, v):
            """The band in blocks of CHUNK queries, each against the CHUNK + 2w keys around
            it (unfold: a strided view), the keys outside the band or the sequence masked:
            (T / CHUNK) x CHUNK x (CHUNK + 2w) scores instead of T x T."""
            B, H, T, dh = q.shape
            w, c = self.window, min(CHUNK, self.window)
            nb = -(-T // c)
            pad = nb * c - T
            qb = F.pad(q * (1.0 / math.sqrt(dh)), (0, 0, 0, pad)).view(B, H, nb, c, dh)
            kw = F.pad(k, (0, 0, w, w + pad)).unfold(2, c + 2 * w, c)    # (B, H, nb, dh, c + 2w)
            vw = F.pad(v, (0, 0, w, w + pad)).unfold(2, c + 2 * w, c)
            key = ("chunks", T)
            if key not in self._masks:
                qi = torch.arange(c)[:, None]
                kj = torch.arange(c + 2 * w)[None, :]
                pos = torch.arange(nb)[:, None, None] * c - w + kj         # key positions
                self._masks[key] = ((kj - w - qi).abs() <= w) & (pos >= 0) & (pos < T)
            s = torch.matmul(qb, kw).masked_fill(~self._masks[key], float("-inf"))
            o = torch.matmul(torch.softmax(s, dim=-1), vw.transpose(-1, -2))  # (B, H, nb, c, dh)
            return o.reshape(B, H, nb * c, dh)[:, :, :T]

    def masked_mean(y, valid):
        m = valid.unsqueeze(-1).to(y.dtype)                       # (B, T, 1)
        return (y * m).sum(1) / m.sum(1).clamp(min=1.0)

    class ImdbClassifier(nn.Module):   # R1
        def __init__(self, heads, impl, vocab=20000, dim=128, max_len=256):
            super().__init__()
            self.tokens = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(max_len, dim)
            self.attn = Attention(heads, dim, impl)
            self.head = nn.Linear(dim, 2)

        def forward(self, ids, valid, lengths=None):
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = self.tokens(ids) + self.pos(pos)[None]
            return self.head(masked_mean(self.attn(x, valid), valid))

    class TnewsClassifier(nn.Module):   # R2, R4; rnn "gru": R2-gru
        def __init__(self, heads, impl, vocab=6000, dim=128, hidden=128, classes=15, rnn="lstm"):
            super().__init__()
            self.tokens = nn.Embedding(vocab, dim)
            self.lstm = (nn.GRU if rnn == "gru" else nn.LSTM)(dim, hidden, batch_first=True, bidirectional=True)
            self.attn = Attention(heads, 2 * hidden, impl)
            self.head = nn.Linear(2 * hidden, classes)

        def forward(self, ids, valid, lengths):
            T = ids.shape[1]
            x = self.tokens(ids)
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                       enforce_sorted=False)
            y, _ = self.lstm(packed)
            y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=T)
            return self.head(masked_mean(self.attn(y, valid), valid))

    return Attention, ImdbClassifier, TnewsClassifier


def build_encoder(torch, layers, heads, dim, ff, checkpoint):
    """R6: torch.nn.TransformerEncoder of pre-norm layers, no dropout; with checkpoint,
    each layer through torch.utils.checkpoint (use_reentrant=False).  x (B, T, D)."""
    nn = torch.nn
    layer = nn.TransformerEncoderLayer(dim, heads, ff, dropout=0.0, batch_first=True,
                                       norm_first=True)
    try:
        enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    except TypeError:
        enc = nn.TransformerEncoder(layer, layers)
    if not checkpoint:
        return enc
    from torch.utils.checkpoint import checkpoint as ckpt

    class Checkpointed(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = enc

        def forward(self, x):
            for l in self.enc.layers:
                x = ckpt(l, x, use_reentrant=False)
            return x
    return Checkpointed()


def torch_version_tuple(torch):
    parts = []
    for p in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def make_adam(torch, params):
    """Best CPU Adam available: fused (torch >= 2.4), else foreach."""
    params = list(params)
    if torch_version_tuple(torch) >= (2, 4):
        try:
            return torch.optim.Adam(params, lr=1e-3, fused=True), "fused"
        except (RuntimeError, TypeError, ValueError):
            pass
    try:
        return torch.optim.Adam(params, lr=1e-3, foreach=True), "foreach"
    except TypeError:
        return torch.optim.Adam(params, lr=1e-3), "for-loop"


# ----------------------------------------------------------------------------
# One case, one impl, in this process
# ----------------------------------------------------------------------------

def time_loop(fn, warmup, iters, max_seconds=None):
    """Median seconds of `iters` timed calls after `warmup` untimed ones.

    With max_seconds (for a busy machine): warm-ups stop after the first once
    they pass 20% of it, and the timed calls are cut to what fits in the rest
    (never fewer than 3, unless fewer were asked for).  Returns (median, warm-ups done, timed calls done).
    """
    t_start = time.perf_counter()
    done_warm, last = 0, None
    for _ in range(warmup):
        t0 = time.perf_counter()
        fn()
        last = time.perf_counter() - t0
        done_warm += 1
        if max_seconds and time.perf_counter() - t_start > 0.2 * max_seconds:
            break
    if max_seconds and last:
        left = max_seconds - (time.perf_counter() - t_start)
        iters = min(iters, max(3, int(left / last)))
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), done_warm, len(times)


def run_case(torch, case, mode, impl, warmup, iters, threads, max_seconds=None, r5_dense=False,
             precision="fp32"):
    # The RSS the case begins with (Python, libtorch and its libraries; bench.cpp's base_rss_mb):
    # rss_over_base_mb is the peak above it, what the case itself took.
    base_rss = current_rss_mb()
    spec = CASES[case]
    # bf16: torch.autocast around each forward (the backward runs in the forward's dtypes).
    if precision == "bf16":
        def cast():
            return torch.autocast("cpu", dtype=torch.bfloat16)
    else:
        cast = contextlib.nullcontext
    model_kind, H, B, T = spec["model"], spec["heads"], spec["batch"], spec["T"]
    if precision == "int8" and (mode != "infer" or model_kind not in ("R1", "R2", "R4")):
        raise SystemExit("peer.py: int8 (quantize_dynamic) is for the classifiers' inference (R1, R2, R4 in infer mode), "
                         "not %s %s" % (case, mode))
    if mode not in MODES[model_kind]:
        raise SystemExit("peer.py: case %s has no mode %r (modes: %s)"
                         % (case, mode, ", ".join(MODES[model_kind])))
    if impl not in MODEL_IMPLS.get(model_kind, DEFAULT_IMPLS):
        raise SystemExit("peer.py: impl %s does not apply to case %s (impls: %s)"
                         % (impl, case, ", ".join(MODEL_IMPLS.get(model_kind, DEFAULT_IMPLS))))
    if impl == "sdpa" and not sdpa_available(torch):
        raise SystemExit("peer.py: impl sdpa needs F.scaled_dot_product_attention "
                         "(torch >= 2.0); this is torch %s" % torch.__version__)
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    Attention, ImdbClassifier, TnewsClassifier = build_modules(torch)
    extra = {}

    if model_kind == "R5" and impl in ("hand", "sdpa") and T > R5_DENSE_MAX_T and not r5_dense:
        raise SystemExit("peer.py: skipped %s %s: a dense (T, T) mask does T / (2w + 1) = %.0f times "
                         "the band's work (minutes per run); --r5-dense runs it"
                         % (case, impl, T / (2 * spec["window"] + 1)))
    if model_kind == "R5" and impl == "hand":
        # Scores, weights and their gradients: about four dense (B, H, T, T) floats.
        need = 4 * B * H * T * T * 4
        avail = mem_available()
        if avail is not None and need > 0.8 * avail:
            raise SystemExit("peer.py: skipped %s hand: its dense scores need about %.1f GiB, "
                             "%.1f GiB available" % (case, need / 2 ** 30, avail / 2 ** 30))
    if model_kind in ("R3", "R5", "R6"):
        D = 256
        if model_kind == "R6":
            model = build_encoder(torch, spec["layers"], H, D, spec["ff"], spec["checkpoint"])
            extra["checkpoint"] = spec["checkpoint"]
        else:
            model = Attention(H, D, impl, spec.get("window"))
        if "window" in spec:
            extra["window"] = spec["window"]
        x = torch.randn(B, T, D, generator=g).requires_grad_(mode == "train")
        valid = torch.ones(B, T, dtype=torch.bool)
        grad_out = torch.randn(B, T, D, generator=g)
        samples = B

        if mode == "train":
            model.train()

            def step():
                model.zero_grad(set_to_none=True)
                x.grad = None
                with cast():
                    y = model(x) if model_kind == "R6" else model(x, valid)
                y.backward(grad_out.to(y.dtype))
            extra["step"] = "forward + backward (params and input), no optimizer"
        else:
            model.eval()

            def step():
                with torch.inference_mode(), cast():
                    model(x, valid)
    else:
        if model_kind == "R1":
            model = ImdbClassifier(H, impl)
            vocab, classes = 20000, 2
        else:
            model = TnewsClassifier(H, impl, rnn=spec.get("rnn", "lstm"))
            vocab, classes = 6000, 15
            if "rnn" in spec:
                extra["rnn"] = spec["rnn"]

        if model_kind == "R4":
            lens = r4_lengths()
            extra["lengths"] = "lognormal(%.2f,%.2f) clip[%d,%d], n=%d, mean %.1f, max %d" % (
                R4_MU_SIGMA[0], R4_MU_SIGMA[1], R4_MIN, R4_MAX, len(lens),
                sum(lens) / len(lens), max(lens))
            ids_all = [torch.randint(1, vocab, (n,), generator=g) for n in lens]
            samples = len(lens)
            if B == 1:
                batches = [(ids.unsqueeze(0), torch.ones(1, n, dtype=torch.bool),
                            torch.tensor([n])) for ids, n in zip(ids_all, lens)]
            else:
                batches = []
                for s in range(0, len(lens), B):
                    chunk, cl = ids_all[s:s + B], lens[s:s + B]
                    Tm = max(cl)
                    ids = torch.zeros(len(cl), Tm, dtype=torch.long)   # 0 = padding id
                    for i, (t, n) in enumerate(zip(chunk, cl)):
                        ids[i, :n] = t
                    lt = torch.tensor(cl)
                    batches.append((ids, torch.arange(Tm)[None, :] < lt[:, None], lt))
        else:
            ids = torch.randint(1, vocab, (B, T), generator=g)
            lt = torch.full((B,), T, dtype=torch.long)
            batches = [(ids, torch.ones(B, T, dtype=torch.bool), lt)]
            samples = B
        labels = [torch.randint(0, classes, (b[0].shape[0],), generator=g) for b in batches]

        if mode == "train":
            model.train()
            opt, kind = make_adam(torch, model.parameters())
            extra["adam"] = kind
            loss_fn = torch.nn.functional.cross_entropy

            def step():
                for (ids, valid, lens_t), y in zip(batches, labels):
                    opt.zero_grad(set_to_none=True)
                    with cast():
                        loss = loss_fn(model(ids, valid, lens_t), y)
                    loss.backward()
                    opt.step()
        else:
            model.eval()
            if precision == "int8":
                # Dynamic quantization as a user serves with it: int8 weights for every nn.Linear,
                # nn.LSTM and nn.GRU (nn.MultiheadAttention's projections stay float in torch),
                # activations quantized at run time.
                from torch.ao.quantization import quantize_dynamic
                model = quantize_dynamic(model, {torch.nn.Linear, torch.nn.LSTM, torch.nn.GRU}, dtype=torch.qint8)
                extra["quantized"] = "quantize_dynamic({nn.Linear, nn.LSTM, nn.GRU}, qint8)"

            def step():
                with torch.inference_mode(), cast():
                    for ids, valid, lens_t in batches:
                        model(ids, valid, lens_t)

    med, warm_done, iters_done = time_loop(step, warmup, iters, max_seconds)
    out = {
        "case": case, "mode": mode, "impl": impl, "precision": precision,
        "samples_per_s": samples / med, "median_ms": med * 1e3,
        "peak_rss_mb": peak_rss_mb(), "base_rss_mb": base_rss,
        "rss_over_base_mb": peak_rss_mb() - base_rss,
        "torch_version": torch.__version__, "threads": torch.get_num_threads(),
        "batch": B, "T": T, "samples_per_iter": samples,
        "warmup": warm_done, "iters": iters_done,
        "malloc": malloc_name(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
    }
    out.update(extra)
    return out


def run_gemm(torch, iters, max_seconds=None, n=2048, precision="fp32"):
    g = torch.Generator().manual_seed(SEED)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(n, n, generator=g).to(dtype)
    b = torch.randn(n, n, generator=g).to(dtype)
    c = torch.empty(n, n, dtype=dtype)
    med, _, iters = time_loop(lambda: torch.mm(a, b, out=c), 3, iters, max_seconds)
    return {"case": "GEMM-%d" % n, "mode": precision, "impl": "torch.mm",
            "gflops": 2.0 * n ** 3 / med / 1e9, "median_ms": med * 1e3, "iters": iters,
            "peak_rss_mb": peak_rss_mb(), "torch_version": torch.__version__,
            "threads": torch.get_num_threads(), "malloc": malloc_name(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}


def check_impls(torch):
    """Same weights, padded batch: hand, mha, sdpa and packed must agree (outputs and grads);
    R5's three band impls must agree with a dense 0/-inf mask, R6-ckpt's gradients with R6's."""
    Attention, _, _ = build_modules(torch)
    g = torch.Generator().manual_seed(SEED)
    B, T, D, H = 3, 37, 256, 8
    x0 = torch.randn(B, T, D, generator=g)
    valid = torch.arange(T)[None, :] < torch.tensor([T, 20, 1])[:, None]
    ref = Attention(H, D, "hand")
    outs = {}
    for impl in DEFAULT_IMPLS:
        if impl == "sdpa" and not sdpa_available(torch):
            continue
        m = Attention(H, D, impl)
        with torch.no_grad():
            if impl == "mha":
                m.mha.in_proj_weight.copy_(ref.in_proj.weight)
                m.mha.in_proj_bias.copy_(ref.in_proj.bias)
                m.mha.out_proj.weight.copy_(ref.out_proj.weight)
                m.mha.out_proj.bias.copy_(ref.out_proj.bias)
            else:
                m.load_state_dict(ref.state_dict())
        x = x0.clone().requires_grad_(True)
        y = m(x, valid)
        (y * valid[..., None]).square().sum().backward()
        outs[impl] = (y.detach(), x.grad)
        with torch.inference_mode():
            outs[impl + "/eval"] = (m.eval()(x0, valid), x.grad)
    base_y, base_g = outs["hand"]
    worst = 0.0
    for k, (y, gx) in outs.items():
        dy = (y - base_y)[valid].abs().max().item()
        dg = (gx - base_g).abs().max().item()
        worst = max(worst, dy, dg)
        print("check %-10s max|dy| %.2e  max|dx.grad| %.2e" % (k, dy, dg))
    # R5's band: hand (dense mask), sdpa (dense mask) and chunked, against a dense 0/-inf mask
    # built here; T not a multiple of the block, a window wider than the block.
    T5, w5 = 300, 130
    i = torch.arange(T5)
    ref_mask = torch.zeros(T5, T5).masked_fill((i[:, None] - i[None, :]).abs() > w5, float("-inf"))
    x5 = torch.randn(1, T5, D, generator=g)
    ref5 = Attention(H, D, "hand")
    band = {}
    for impl in [m for m in MODEL_IMPLS["R5"] if m != "sdpa" or sdpa_available(torch)] + ["dense"]:
        m = Attention(H, D, "hand" if impl == "dense" else impl, None if impl == "dense" else w5)
        m.load_state_dict(ref5.state_dict())
        if impl == "dense":
            m.core = lambda q, k, v, valid: torch.matmul(torch.softmax(
                torch.matmul(q / math.sqrt(D // H), k.transpose(-1, -2)) + ref_mask, -1), v)
        x = x5.clone().requires_grad_(True)
        y = m(x, torch.ones(1, T5, dtype=torch.bool))
        y.square().sum().backward()
        band[impl] = (y.detach(), x.grad)
    for k, (y, gx) in band.items():
        dy = (y - band["dense"][0]).abs().max().item()
        dg = (gx - band["dense"][1]).abs().max().item()
        worst = max(worst, dy, dg)
        print("check R5 %-7s max|dy| %.2e  max|dx.grad| %.2e" % (k, dy, dg))
    # R6-ckpt: the same gradients as R6 (2 layers, T 64).
    grads = []
    for ck in (False, True):
        torch.manual_seed(SEED)
        enc = build_encoder(torch, 2, H, D, 1024, ck)
        x = torch.randn(2, 64, D, generator=torch.Generator().manual_seed(SEED)).requires_grad_(True)
        enc(x).square().sum().backward()
        grads.append([x.grad] + [p.grad for p in enc.parameters()])
    dg = max((a - b).abs().max().item() for a, b in zip(*grads))
    worst = max(worst, dg)
    print("check R6-ckpt max|grad - R6 grad| %.2e" % dg)
    print("check: %s (tolerance 1e-4)" % ("OK" if worst < 1e-4 else "FAILED"))
    return worst < 1e-4


# ----------------------------------------------------------------------------
# Fresh subprocess per (case, mode, impl)
# ----------------------------------------------------------------------------

JEMALLOC_LIB = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"


def child(args, extra_argv, malloc=None):
    """Runs peer.py in a fresh process; returns its JSON line (or {"error": ...}).

    malloc None: inherit this process's allocator; "glibc": strip a jemalloc
    LD_PRELOAD; "jemalloc": preload it with MALLOC_CONF keeping freed pages.
    """
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(args.threads)
    env["MKL_NUM_THREADS"] = str(args.threads)
    pre = [x for x in env.get("LD_PRELOAD", "").replace(" ", ":").split(":")
           if x and "jemalloc" not in x]
    if malloc == "jemalloc":
        pre.insert(0, JEMALLOC_LIB)
        env["MALLOC_CONF"] = JEMALLOC_CONF
    if malloc is not None:
        env["LD_PRELOAD"] = ":".join(pre)
        if not pre:
            del env["LD_PRELOAD"]
    cmd = [sys.executable, os.path.abspath(__file__), "--json",
           "--threads", str(args.threads), "--iters", str(args.iters),
           "--warmup", str(args.warmup), "--precision", args.precision] + extra_argv
    if args.max_seconds:
        cmd += ["--max-seconds", str(args.max_seconds)]
    if args.r5_dense:
        cmd += ["--r5-dense"]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def impls_for(args, case=None):
    """Impls to try: the one asked for, or every impl this torch has (for `case`: those
    that apply to it; without one: every impl of any case)."""
    if args.impl != "best":
        return [args.impl]
    import torch
    apply = MODEL_IMPLS.get(CASES[case]["model"], DEFAULT_IMPLS) if case else IMPLS
    return [i for i in IMPLS if i in apply and (i != "sdpa" or sdpa_available(torch))]


def best_of(results):
    ok = [r for r in results.values() if "error" not in r]
    return max(ok, key=lambda r: r["samples_per_s"]) if ok else None


def fmt_sps(r):
    if r is None:
        return "-"
    if "error" in r:
        return "err"
    return "%.1f" % r["samples_per_s"]


def print_table(table):
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for k, r in enumerate(table):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def run_all(args):
    import torch
    impls = impls_for(args)
    notes = []
    if not sdpa_available(torch):
        notes.append("torch %s has no F.scaled_dot_product_attention: sdpa impl skipped, "
                     "library path = nn.MultiheadAttention only" % torch.__version__)
    if args.both_malloc and not os.path.exists(JEMALLOC_LIB):
        raise SystemExit("peer.py: --both-malloc needs %s (apt install libjemalloc2)"
                         % JEMALLOC_LIB)
    mallocs = ["glibc", "jemalloc"] if args.both_malloc else [None]

    def emit(r, **keys):
        if args.json:
            r = dict(r)
            for k, v in keys.items():
                r.setdefault(k, v)
            print(json.dumps(r), flush=True)
        elif args.verbose:
            print("  %s" % " ".join(str(v) for v in keys.values()) + ": "
                  + ("%.1f" % r["samples_per_s"] if "samples_per_s" in r else
                     "%.1f GFLOP/s" % r["gflops"] if "gflops" in r else r.get("error", "?")),
                  file=sys.stderr, flush=True)

    gemm = {}
    for mal in mallocs:
        gemm[mal] = child(args, ["--gemm"], mal)
        emit(gemm[mal], case="GEMM-2048", malloc=mal)
    rows = []
    for case, mode in ALL_RUNS + (EXTRA_RUNS if args.all_modes else []) + OPT_IN_RUNS:
        if (args.cases or (case, mode) in OPT_IN_RUNS) and case not in (args.cases or []):
            continue
        res = {mal: {} for mal in mallocs}
        for impl in impls_for(args, case):
            for mal in mallocs:   # interleaved, so that machine noise hits both alike
                r = res[mal][impl] = child(args, ["--case", case, "--mode", mode,
                                                  "--impl", impl], mal)
                emit(r, case=case, mode=mode, impl=impl, malloc=mal)
        rows.append((case, mode, res))

    print()
    print("PyTorch CPU peer: torch %s, %s threads, OMP_WAIT_POLICY=%s, %d warm-ups + "
          "median of %d, fresh process per (case, impl%s)"
          % (torch.__version__, args.threads, os.environ.get("OMP_WAIT_POLICY", "(default)"),
             args.warmup, args.iters, ", malloc" if args.both_malloc else ""))
    for mal in mallocs:
        g = gemm[mal]
        if "gflops" in g:
            print("GEMM 2048^3 FP32 (%s): %.1f GFLOP/s" % (g.get("malloc"), g["gflops"]))
    hdr = ["case", "mode", "batch", "T"]
    for mal in mallocs:
        tag = " (%s)" % ("je" if mal == "jemalloc" else mal) if mal else ""
        hdr += ["%s%s" % (i, tag) for i in impls] + ["best%s" % tag, "impl", "RSS MB"]
    hdr += ["iters"]
    table = [hdr]
    for case, mode, res in rows:
        spec = CASES[case]
        line = [case, mode, str(spec["batch"]), str(spec["T"] or "var")]
        its = []
        for mal in mallocs:
            b = best_of(res[mal])
            line += [fmt_sps(res[mal].get(i)) for i in impls]
            line += [fmt_sps(b), b["impl"] if b else "-",
                     "%.0f" % b["peak_rss_mb"] if b else "-"]
            its += [r["iters"] for r in res[mal].values() if "iters" in r]
        line.append(str(min(its)) if its else "-")
        table.append(line)
    print_table(table)
    if not args.both_malloc:
        any_r = next((r for _, _, res in rows for r in res[None].values()
                      if "error" not in r), gemm[None])
        notes.append("malloc: %s" % any_r.get("malloc", "?"))
    notes.append("columns are samples/s; RSS = peak RSS of the best impl's process; "
                 "iters = fewest timed iterations in the row")
    if args.max_seconds:
        notes.append("--max-seconds %g: slow steps get fewer warm-ups/iterations (>= 3)"
                     % args.max_seconds)
    for n in notes:
        print("note: " + n)
    for case, mode, res in rows:
        for mal in mallocs:
            for impl, r in res[mal].items():
                if "error" in r:
                    print("error: %s %s %s %s: %s" % (case, mode, impl, mal or "", r["error"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=sorted(CASES))
    ap.add_argument("--mode", choices=("train", "infer"), default=None,
                    help="default: train, or infer for R4")
    ap.add_argument("--impl", choices=IMPLS + ("best",), default="best",
                    help="hand/mha/sdpa run in this process; best (default) runs each "
                         "in a fresh subprocess and reports the fastest")
    ap.add_argument("--all", action="store_true", help="run every case, print a table")
    ap.add_argument("--cases", nargs="*", help="with --all: only these cases (R6 and R6-ckpt "
                                               "run only when named here)")
    ap.add_argument("--gemm", action="store_true", help="GEMM 2048^3 GFLOP/s (FP32, or bf16 with --precision)")
    ap.add_argument("--r4-lengths", action="store_true", help="print the R4 lengths")
    ap.add_argument("--check", action="store_true",
                    help="check that hand, mha, sdpa and packed compute the same attention")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="busy machine: cap warm-up + timed time per (case, impl) run, "
                         "cutting iterations (>= 3); JSON 'iters' says how many ran")
    ap.add_argument("--both-malloc", action="store_true",
                    help="with --all: run every case with glibc malloc and with jemalloc "
                         "(preloaded, MALLOC_CONF=%s), interleaved" % JEMALLOC_CONF)
    ap.add_argument("--r5-dense", action="store_true",
                    help="also run R5's dense-mask impls (hand, sdpa) above T = %d" % R5_DENSE_MAX_T)
    ap.add_argument("--all-modes", action="store_true",
                    help="with --all: also R1/R2 inference and R3 forward-only")
    ap.add_argument("--threads", type=int,
                    default=int(os.environ.get("OMP_NUM_THREADS", "2") or 2))
    ap.add_argument("--json", action="store_true", help="JSON lines instead of text")
    ap.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32",
                    help="bf16: torch.autocast(\"cpu\", bfloat16) around each forward; int8: quantize_dynamic on "
                         "nn.Linear and nn.LSTM (inference)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.iters < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--iters and --threads must be >= 1, --warmup >= 0")

    if args.r4_lengths:
        lens = r4_lengths()
        print(json.dumps({"lengths": lens, "mean": sum(lens) / len(lens), "max": max(lens),
                          "seed": SEED, "mu_sigma": R4_MU_SIGMA, "clip": [R4_MIN, R4_MAX]}))
        return
    if args.all:
        run_all(args)
        return
    if not (args.gemm or args.case or args.check):
        ap.error("give --case, --all, --gemm, --check or --r4-lengths")

    # OMP_NUM_THREADS only counts if set before torch starts its pool.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    torch.set_num_threads(args.threads)

    if args.check:
        if not sdpa_available(torch):
            print("note: no F.scaled_dot_product_attention in torch %s: sdpa skipped"
                  % torch.__version__)
        sys.exit(0 if check_impls(torch) else 1)
    if args.gemm and args.precision == "int8":
        raise SystemExit("peer.py: --gemm measures fp32 or bf16, not int8")
    if args.gemm:
        r = run_gemm(torch, args.iters, args.max_seconds, precision=args.precision)
        print(json.dumps(r) if args.json else
              "GEMM 2048^3 %s, %d threads: %.1f GFLOP/s (median %.1f ms)"
              % (args.precision, r["threads"], r["gflops"], r["median_ms"]))
        return

    mode = args.mode or ("infer" if CASES[args.case]["model"] == "R4" else "train")
    if args.impl != "best":
        r = run_case(torch, args.case, mode, args.impl, args.warmup, args.iters, args.threads,
                     args.max_seconds, args.r5_dense, args.precision)
    else:
        res = {i: child(args, ["--case", args.case, "--mode", mode, "--impl", i])
               for i in impls_for(args, args.case)}
        r = best_of(res)
        if r is None:
            raise SystemExit("peer.py: every impl failed: %s" % json.dumps(res))
        r = dict(r)
        r["all_impls"] = {i: (round(v["samples_per_s"], 2) if "error" not in v else v["error"])
                          for i, v in res.items()}
        if not sdpa_available(torch):
            r["note"] = "no F.scaled_dot_product_attention in torch %s: sdpa skipped" \
                        % torch.__version__
    if args.json:
        print(json.dumps(r))
    else:
        print("%s %s impl=%s: %.1f samples/s, median %.2f ms, peak RSS %.0f MB "
              "(torch %s, %d threads)" % (r["case"], r["mode"], r["impl"], r["samples_per_s"],
                                          r["median_ms"], r["peak_rss_mb"],
                                          r["torch_version"], r["threads"]))
        if "all_impls" in r:
            print("  all impls (samples/s): %s" % r["all_impls"])


if __name__ == "__main__":
    main()
