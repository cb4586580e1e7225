#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the PyTorch golden files that attn's layer, loss and optimizer tests compare against.

Usage:
    python3 tests/golden/make_goldens.py [--out DIR]            # (re)generate every golden
    python3 tests/golden/make_goldens.py --check-attn IN OUT     # load an attn-written file into
                                                                 # the torch round-trip model, save OUT

Conventions (see README.md beside this file):
  * every random input, parameter, mask and upstream gradient ("dout") is drawn in float32 and
    stored as F32, so it is exact in float32 and float64;
  * the reference is computed in float64 (module.double() on the same weights) and every computed
    output / gradient is stored as F64; integer tensors are I64;
  * masks are F32 with 1.0 = real token, 0.0 = padding;
  * gradients are named "grad.<name>" with PyTorch's parameter names;
    loss = sum(out * dout) (+ extra terms noted per case);
  * every file carries "__metadata__" with the case's hyper-parameters as strings.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

HERE = Path(__file__).resolve().parent
MAX_FILE_BYTES = 200 * 1024
MAX_TOTAL_BYTES = 1536 * 1024
TOL = 1e-12  # agreement required between torch and the hand-written cross-checks (float64)


# ----------------------------------------------------------------------------------------------
# helpers

def f32(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float32).contiguous().clone()


def f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64).contiguous().clone()


def i64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.int64).contiguous().clone()


def randn32(*shape: int, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal draw times scale, rounded to float32 (so exact in float32 and float64)."""
    return (torch.randn(*shape, dtype=torch.float32) * scale).to(torch.float32)


def mask_from_lengths(lengths: list[int], T: int) -> torch.Tensor:
    """[B, T] float32, 1.0 = real token, 0.0 = padding."""
    ar = torch.arange(T)
    return (ar[None, :] < torch.tensor(lengths)[:, None]).to(torch.float32)


def assert_close(name: str, a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> None:
    if a.shape != b.shape:
        raise AssertionError(f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
    if not torch.isfinite(a).all() or not torch.isfinite(b).all():
        raise AssertionError(f"{name}: non-finite values")
    diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    if diff > tol:
        raise AssertionError(f"{name}: max |diff| {diff:.3e} > {tol:.0e}")


def meta(case: str, seed: int, **kv) -> dict[str, str]:
    out = {
        "case": case,
        "seed": str(seed),
        "torch_version": torch.__version__,
        "generator": "tests/golden/make_goldens.py",
    }
    for k, v in kv.items():
        if isinstance(v, (list, tuple)):
            v = ",".join(str(e) for e in v)
        elif isinstance(v, bool):
            v = "true" if v else "false"
        out[k] = str(v)
    return out


def write(out_dir: Path, fname: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str],
          written: list[Path]) -> None:
    for k, t in tensors.items():
        if t.dtype not in (torch.float32, torch.float64, torch.int64):
            raise AssertionError(f"{fname}: {k} has dtype {t.dtype}")
        if t.is_floating_point() and k not in ("attn_mask", "memory_mask") and not torch.isfinite(t).all():
            raise AssertionError(f"{fname}: {k} has non-finite values")
    path = out_dir / fname
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)
    canonicalize_header(path)
    written.append(path)


def canonicalize_header(path: Path) -> None:
    """Rewrites the JSON header with "__metadata__" keys sorted.

    safetensors serialises the metadata map in hash order, which changes from run to run; sorting
    it makes regeneration byte-identical. Data offsets are relative to the end of the header, so
    the tensor bytes are untouched.
    """
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    md = header.pop("__metadata__", None)
    ordered = {"__metadata__": dict(sorted(md.items()))} if md is not None else {}
    ordered.update(header)
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=True).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned, as save_file does
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    path.chmod(0o644)  # save_file creates 0600; goldens are plain repository files


def add_grads(tensors: dict[str, torch.Tensor], module: nn.Module) -> None:
    for name, p in module.named_parameters():
        tensors["grad." + name] = f64(p.grad)


# ----------------------------------------------------------------------------------------------
# 1. Linear

def case_linear(out_dir: Path, written: list[Path]) -> None:
    seed = 1
    torch.manual_seed(seed)
    lin = nn.Linear(7, 4)  # default init: uniform(+-1/sqrt(7)) on weight and bias, float32
    x = randn32(3, 5, 7)
    dout = randn32(3, 5, 4)
    t = {"x": f32(x), "weight": f32(lin.weight), "bias": f32(lin.bias), "dout": f32(dout)}

    lin = lin.double()
    x64 = x.double().requires_grad_()
    out = lin(x64)
    (out * dout.double()).sum().backward()
    assert_close("linear.out", out, x.double() @ t["weight"].double().T + t["bias"].double())
    t.update({"out": f64(out), "grad.x": f64(x64.grad)})
    add_grads(t, lin)
    write(out_dir, "linear.safetensors", t,
          meta("linear", seed, in_features=7, out_features=4, bias=True,
               loss="sum(out*dout)"), written)


# ----------------------------------------------------------------------------------------------
# 2. MultiheadAttention

def mha_reference(x, in_w, in_b, out_w, out_b, heads, key_valid, attn_mask=None):
    """Hand-written MHA with the attn contract: a query row whose keys are all masked gets zero
    attention weights (so its attention output is 0), never NaN.

    x [B,T,D]; key_valid bool [B,T] (True = real token); attn_mask additive float [T,T] or
    [B*heads,T,T] (per sample and head), or None.
    Returns out [B,T,D], weights [B,H,T,T].
    """
    B, T, D = x.shape
    hd = D // heads
    qkv = x @ in_w.T + in_b                                     # [B,T,3D]
    q, k, v = qkv.chunk(3, dim=-1)

    def split(z):                                              # [B,T,D] -> [B,H,T,hd]
        return z.reshape(B, T, heads, hd).transpose(1, 2)

    q, k, v = split(q), split(k), split(v)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)          # [B,H,T,T]
    if attn_mask is not None:
        scores = scores + (attn_mask.reshape(B, heads, T, T) if attn_mask.dim() == 3 else attn_mask)
    scores = scores.masked_fill(~key_valid[:, None, None, :], float("-inf"))
    # Equivalent to softmax followed by nan_to_num(0.0) in the forward pass, but written so that
    # no NaN enters the backward pass either (nan_to_num would let softmax's NaN gradient through).
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)     # [B,H,T,1]
    w = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    o = (w @ v).transpose(1, 2).reshape(B, T, D)
    return o @ out_w.T + out_b, w


def mha_param_names():
    return ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]


def mha_check_torch_vs_reference(mha64, x, dout, key_valid, attn_mask, heads, what):
    """Asserts torch MHA == mha_reference (out, weights, every gradient) on this batch."""
    params = dict(mha64.named_parameters())
    # torch side
    mha64.zero_grad()
    xt = x.double().clone().requires_grad_()
    kpm = torch.zeros(key_valid.shape, dtype=torch.float64).masked_fill(~key_valid, float("-inf"))
    out_t, w_t = mha64(xt, xt, xt, key_padding_mask=kpm, need_weights=True,
                       attn_mask=attn_mask, average_attn_weights=False)
    (out_t * dout).sum().backward()
    grads_t = {n: params[n].grad.clone() for n in mha_param_names()}
    # reference side, on fresh leaves holding the same values
    leaves = {n: params[n].detach().clone().requires_grad_() for n in mha_param_names()}
    xr = x.double().clone().requires_grad_()
    out_r, w_r = mha_reference(xr, leaves["in_proj_weight"], leaves["in_proj_bias"],
                               leaves["out_proj.weight"], leaves["out_proj.bias"], heads,
                               key_valid, attn_mask)
    (out_r * dout).sum().backward()
    assert_close(f"{what}: out", out_t, out_r)
    assert_close(f"{what}: weights", w_t, w_r)
    assert_close(f"{what}: grad.x", xt.grad, xr.grad)
    for n in mha_param_names():
        assert_close(f"{what}: grad.{n}", grads_t[n], leaves[n].grad)
    mha64.zero_grad()


def seeded_mha(seed: int, dim: int, heads: int) -> nn.MultiheadAttention:
    """nn.MultiheadAttention(dim, heads, batch_first=True) drawn after manual_seed(seed), with random
    biases: torch zero-initialises both, and random ones make the tests see them."""
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(embed_dim=dim, num_heads=heads, batch_first=True, dropout=0.0)
    with torch.no_grad():
        mha.in_proj_bias.copy_(randn32(3 * dim, scale=0.5))
        mha.out_proj.bias.copy_(randn32(dim, scale=0.5))
    return mha


def case_mha(out_dir: Path, written: list[Path], heads: int, dim: int, seed: int, variant: str):
    """variant: "" (key padding only), "attnmask" (plus additive causal attn_mask), "fullpad",
    "causal" (is_causal=True with the causal mask: attn's AttentionOptions::causal, no attn_mask
    stored), "perhead" (a 3-D attn_mask (B*heads, T, T): random values, -inf at random places
    but never on key 0, so no row is fully masked), "perhead_causal" (the same stored mask;
    torch gets it with -inf above the diagonal added: attn's AttentionOptions::causal)."""
    B, T = 3, 5
    lengths = [5, 0, 3] if variant == "fullpad" else [5, 3, 1]
    mha = seeded_mha(seed, dim, heads)
    x = randn32(B, T, dim)
    dout = randn32(B, T, dim)
    mask = mask_from_lengths(lengths, T)
    key_valid = mask.bool()
    attn_mask = None
    t = {"x": f32(x), "mask": mask}
    if variant == "attnmask":
        # causal: -inf strictly above the diagonal; random finite values on and below it, so the
        # mask is exercised as an additive term rather than as a boolean.
        attn_mask = torch.tril(randn32(T, T, scale=0.5))
        attn_mask = attn_mask.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1),
                                          float("-inf"))
        t["attn_mask"] = attn_mask.clone()
    elif variant == "causal":
        attn_mask = torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    elif variant.startswith("perhead"):
        per_head = randn32(B * heads, T, T, scale=0.5)
        hidden = torch.rand(B * heads, T, T) < 0.3
        hidden[:, :, 0] = False
        per_head = per_head.masked_fill(hidden, float("-inf"))
        t["attn_mask"] = per_head.clone()
        attn_mask = per_head
        if variant == "perhead_causal":
            attn_mask = per_head.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    for n, p in mha.named_parameters():
        t[n] = f32(p)
    t["dout"] = f32(dout)

    mha = mha.double()
    mha.train()  # dropout is 0; training mode keeps torch off its fused inference fast path
    am64 = attn_mask.double() if attn_mask is not None else None
    d64 = dout.double()

    if variant == "fullpad":
        keep = [b for b in range(B) if lengths[b] > 0]
        mha_check_torch_vs_reference(mha, x[keep], d64[keep], key_valid[keep], am64, heads,
                                     f"mha_h{heads}_fullpad (non-degenerate samples)")
        # the full batch: the reference defines the answer for the fully padded sample
        leaves = {n: p.detach().clone().requires_grad_() for n, p in mha.named_parameters()}
        x64 = x.double().requires_grad_()
        out, w = mha_reference(x64, leaves["in_proj_weight"], leaves["in_proj_bias"],
                               leaves["out_proj.weight"], leaves["out_proj.bias"], heads,
                               key_valid, am64)
        (out * d64).sum().backward()
        dead = [b for b in range(B) if lengths[b] == 0]
        for b in dead:
            assert torch.equal(w[b], torch.zeros_like(w[b]))
            assert torch.equal(out[b], leaves["out_proj.bias"].detach().expand(T, dim))
            assert torch.equal(x64.grad[b], torch.zeros_like(x64.grad[b]))
        grads = {n: leaves[n].grad for n in mha_param_names()}
        # and torch really does produce NaN there (documents why the reference is hand-written)
        with torch.no_grad():
            kpm = torch.zeros(B, T, dtype=torch.float64).masked_fill(~key_valid, float("-inf"))
            out_t, _ = mha(x.double(), x.double(), x.double(), key_padding_mask=kpm,
                           need_weights=True, average_attn_weights=False)
            torch_nan = bool(torch.isnan(out_t[dead]).any())
    else:
        mha_check_torch_vs_reference(mha, x, d64, key_valid, am64, heads,
                                     f"mha_h{heads}{'_' + variant if variant else ''}")
        x64 = x.double().requires_grad_()
        kpm = torch.zeros(B, T, dtype=torch.float64).masked_fill(~key_valid, float("-inf"))
        out, w = mha(x64, x64, x64, key_padding_mask=kpm, need_weights=True, attn_mask=am64,
                     average_attn_weights=False, is_causal=variant == "causal")
        (out * d64).sum().backward()
        grads = {n: p.grad for n, p in mha.named_parameters()}
        torch_nan = False

    t.update({"out": f64(out), "weights": f64(w), "grad.x": f64(x64.grad)})
    for n in mha_param_names():
        t["grad." + n] = f64(grads[n])
    fname = f"mha_h{heads}{'_' + variant if variant else ''}.safetensors"
    md = meta("multihead_attention", seed, heads=heads, dim=dim, head_dim=dim // heads, batch=B,
              seq=T, lengths=lengths, batch_first=True, dropout=0.0,
              scaling="1/sqrt(head_dim)", average_attn_weights=False,
              attn_mask="additive causal (-inf above diagonal)" if variant == "attnmask"
              else "causal (is_causal=True): attn's causal option" if variant == "causal"
              else "additive per head (B*heads, T, T)" if variant == "perhead"
              else "additive per head (B*heads, T, T), torch's with -inf above the diagonal: attn's causal option"
              if variant == "perhead_causal" else "none",
              loss="sum(out*dout)",
              reference="hand-written (fully masked rows -> zero weights)" if variant == "fullpad"
              else "torch.nn.MultiheadAttention")
    if variant in ("causal", "perhead_causal"):
        md["causal"] = "true"
    if variant == "fullpad":
        md["torch_gives_nan_on_fully_padded_sample"] = "true" if torch_nan else "false"
    write(out_dir, fname, t, md, written)


def rope_rotate_half(x, rdim, base):
    """Hugging Face Llama's apply_rotary_pos_emb on the first rdim features of x [B,H,T,hd]:
    x * cos + rotate_half(x) * sin, with emb = cat(freqs, freqs)."""
    T = x.shape[2]
    inv_freq = 1.0 / (base ** (torch.arange(0, rdim, 2, dtype=torch.float64) / rdim))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    xr, xp = x[..., :rdim], x[..., rdim:]
    rot = torch.cat((-xr[..., rdim // 2:], xr[..., :rdim // 2]), dim=-1)
    return torch.cat((xr * cos + rot * sin, xp), dim=-1)


def rope_complex(x, rdim, base):
    """Meta's Llama form (RoFormer's interleaved pairs): features (2i, 2i+1) of the first rdim as a
    complex number, times exp(i * t * inv_freq[i])."""
    T = x.shape[2]
    inv_freq = 1.0 / (base ** (torch.arange(0, rdim, 2, dtype=torch.float64) / rdim))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    rot = torch.polar(torch.ones_like(angles), angles)
    xc = torch.view_as_complex(x[..., :rdim].reshape(*x.shape[:-1], rdim // 2, 2).contiguous())
    return torch.cat((torch.view_as_real(xc * rot).flatten(-2), x[..., rdim:]), dim=-1)


def case_mha_rotary(out_dir: Path, written: list[Path], fname: str, heads: int, dim: int, rdim: int, base: float,
                    interleaved: bool, causal: bool, seed: int):
    """nn.MultiheadAttention's parameters with rotary position embeddings on the queries and keys
    after in_proj (torch has no rotary module: the rotation is Hugging Face's rotate_half form or
    Meta's complex form, written out; the attention is F.scaled_dot_product_attention, checked
    against explicit products)."""
    B, T = 3, 7
    lengths = [7, 4, 1]
    hd = dim // heads
    mha = seeded_mha(seed, dim, heads)
    x = randn32(B, T, dim)
    dout = randn32(B, T, dim)
    mask = mask_from_lengths(lengths, T)
    t = {"x": f32(x), "mask": mask}
    for n, p in mha.named_parameters():
        t[n] = f32(p)
    t["dout"] = f32(dout)
    leaves = {n: p.detach().double().clone().requires_grad_() for n, p in mha.named_parameters()}
    x64 = x.double().requires_grad_()
    rope = rope_complex if interleaved else rope_rotate_half

    def split(z):
        return z.reshape(B, T, heads, hd).transpose(1, 2)

    q, k, v = (x64 @ leaves["in_proj_weight"].T + leaves["in_proj_bias"]).chunk(3, dim=-1)
    q, k, v = rope(split(q), rdim, base), rope(split(k), rdim, base), split(v)
    visible = mask.bool()[:, None, None, :].expand(B, heads, T, T)
    if causal:
        visible = visible & torch.ones(T, T, dtype=torch.bool).tril()
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    w = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    assert_close(f"{fname}: sdpa against explicit products", o, w @ v)
    out = o.transpose(1, 2).reshape(B, T, dim) @ leaves["out_proj.weight"].T + leaves["out_proj.bias"]
    (out * dout.double()).sum().backward()
    t.update({"out": f64(out), "weights": f64(w), "grad.x": f64(x64.grad)})
    for n in mha_param_names():
        t["grad." + n] = f64(leaves[n].grad)
    md = meta("multihead_attention_rotary", seed, heads=heads, dim=dim, head_dim=hd, batch=B, seq=T, lengths=lengths,
              rotary_dim=rdim, rotary_base=base, rotary_interleaved="true" if interleaved else "false",
              rotary_form="Meta's complex form (pairs 2i, 2i+1)" if interleaved else "Hugging Face's rotate_half (pairs i, i + rotary_dim/2)",
              positions="0..T-1 in every sample", loss="sum(out*dout)")
    if causal:
        md["causal"] = "true"
    write(out_dir, fname, t, md, written)


def case_mha_cross(out_dir: Path, written: list[Path], heads: int, dim: int, kdim: int, vdim: int, seed: int):
    """Cross-attention: a query (B, Tq, dim) attends to key (B, Tk, kdim) and value (B, Tk, vdim)
    with a key_padding_mask and an additive attn_mask. kdim == vdim == dim: the packed
    in_proj_weight, one "memory" tensor passed as both key and value, a (Tq, Tk) mask. Otherwise
    q/k/v_proj_weight, separate key and value, a per-head (B * heads, Tq, Tk) mask."""
    B, Tq, Tk = 3, 4, 6
    lengths = [6, 2, 5]
    packed = kdim == dim and vdim == dim
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(embed_dim=dim, num_heads=heads, batch_first=True, dropout=0.0,
                                kdim=kdim, vdim=vdim)
    with torch.no_grad():
        mha.in_proj_bias.copy_(randn32(3 * dim, scale=0.5))
        mha.out_proj.bias.copy_(randn32(dim, scale=0.5))
    query = randn32(B, Tq, dim)
    mask = mask_from_lengths(lengths, Tk)
    key_valid = mask.bool()
    if packed:
        memory = randn32(B, Tk, dim)
        am = randn32(Tq, Tk, scale=0.5)
        am[0, 3:] = float("-inf")  # some keys hidden from some queries, never all of a row's real keys
        am[2, 0] = float("-inf")
    else:
        key = randn32(B, Tk, kdim)
        value = randn32(B, Tk, vdim)
        am = randn32(B * heads, Tq, Tk, scale=0.5)
        am[1, 1, 1] = float("-inf")
        am[heads, 0, 0] = float("-inf")
    dout = randn32(B, Tq, dim)
    t = {"query": f32(query), "mask": mask, "attn_mask": am.clone()}
    if packed:
        t["memory"] = f32(memory)
    else:
        t["key"], t["value"] = f32(key), f32(value)
    for n, p_ in mha.named_parameters():
        t[n] = f32(p_)
    t["dout"] = f32(dout)

    mha = mha.double()
    mha.train()  # dropout is 0; training mode keeps torch off its fused inference fast path
    kpm = torch.zeros(B, Tk, dtype=torch.float64).masked_fill(~key_valid, float("-inf"))
    q64 = query.double().requires_grad_()
    if packed:
        m64 = memory.double().requires_grad_()
        k64 = v64 = m64
    else:
        k64 = key.double().requires_grad_()
        v64 = value.double().requires_grad_()
    out, w = mha(q64, k64, v64, key_padding_mask=kpm, need_weights=True, attn_mask=am.double(),
                 average_attn_weights=False)
    (out * dout.double()).sum().backward()
    # the same through explicit products (the weights' definition)
    with torch.no_grad():
        p64 = dict(mha.named_parameters())
        hd = dim // heads
        if packed:
            wq, wk, wv = p64["in_proj_weight"].chunk(3)
        else:
            wq, wk, wv = p64["q_proj_weight"], p64["k_proj_weight"], p64["v_proj_weight"]
        bq, bk, bv = p64["in_proj_bias"].chunk(3)

        def split(z, T):
            return z.reshape(B, T, heads, hd).transpose(1, 2)

        qh = split(q64 @ wq.T + bq, Tq)
        kh = split(k64 @ wk.T + bk, Tk)
        vh = split(v64 @ wv.T + bv, Tk)
        amr = am.double() if packed else am.double().reshape(B, heads, Tq, Tk)  # torch: b * heads + h
        sc = qh @ kh.transpose(-1, -2) / math.sqrt(hd) + amr
        sc = sc.masked_fill(~key_valid[:, None, None, :], float("-inf"))
        wr = torch.softmax(sc, dim=-1)
        o = (wr @ vh).transpose(1, 2).reshape(B, Tq, dim) @ p64["out_proj.weight"].T + p64["out_proj.bias"]
        assert_close("mha_cross: weights vs explicit products", w, wr)
        assert_close("mha_cross: out vs explicit products", out, o)
    t.update({"out": f64(out), "weights": f64(w), "grad.query": f64(q64.grad)})
    if packed:
        t["grad.memory"] = f64(m64.grad)
    else:
        t["grad.key"], t["grad.value"] = f64(k64.grad), f64(v64.grad)
    add_grads(t, mha)
    fname = f"mha_cross_h{heads}" + ("" if packed else f"_k{kdim}_v{vdim}") + ".safetensors"
    write(out_dir, fname, t,
          meta("multihead_attention_cross", seed, heads=heads, dim=dim, kdim=kdim, vdim=vdim, batch=B,
               query_len=Tq, key_len=Tk, key_lengths=lengths, batch_first=True, dropout=0.0,
               key_is_value=packed, average_attn_weights=False,
               attn_mask="additive (Tq, Tk)" if packed else "additive per head (B*heads, Tq, Tk)",
               loss="sum(out*dout)", reference="torch.nn.MultiheadAttention"), written)


# ----------------------------------------------------------------------------------------------
# 3. LSTM

def lstm_reference(x, lengths, p, hidden, bidirectional):
    """Per-sample loop; gate order i, f, g, o (PyTorch). Returns out [B,T,dirs*H], h_n, c_n."""
    B, T, _ = x.shape
    dirs = 2 if bidirectional else 1
    out = torch.zeros(B, T, dirs * hidden, dtype=x.dtype)
    h_n = torch.zeros(dirs, B, hidden, dtype=x.dtype)
    c_n = torch.zeros(dirs, B, hidden, dtype=x.dtype)
    for d in range(dirs):
        sfx = "_reverse" if d == 1 else ""
        w_ih, w_hh = p["weight_ih_l0" + sfx], p["weight_hh_l0" + sfx]
        b_ih, b_hh = p["bias_ih_l0" + sfx], p["bias_hh_l0" + sfx]
        for b in range(B):
            h = torch.zeros(hidden, dtype=x.dtype)
            c = torch.zeros(hidden, dtype=x.dtype)
            steps = range(lengths[b]) if d == 0 else reversed(range(lengths[b]))
            for s in steps:
                g = w_ih @ x[b, s] + b_ih + w_hh @ h + b_hh
                i, f, gg, o = g.chunk(4)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
                h = torch.sigmoid(o) * torch.tanh(c)
                out[b, s, d * hidden:(d + 1) * hidden] = h
            h_n[d, b], c_n[d, b] = h, c
    return out, h_n, c_n


def case_lstm(out_dir: Path, written: list[Path], bidirectional: bool, seed: int) -> None:
    B, T, I, H = 3, 6, 6, 5
    lengths = [4, 6, 2]  # deliberately unsorted: enforce_sorted=False
    dirs = 2 if bidirectional else 1
    torch.manual_seed(seed)
    lstm = nn.LSTM(input_size=I, hidden_size=H, batch_first=True, bidirectional=bidirectional)
    x = randn32(B, T, I)
    dout = randn32(B, T, dirs * H)
    dh_n = randn32(dirs, B, H)
    dc_n = randn32(dirs, B, H)
    t = {"x": f32(x), "lengths": torch.tensor(lengths, dtype=torch.int64)}
    for n, p in lstm.named_parameters():
        t[n] = f32(p)
    t.update({"dout": f32(dout), "dh_n": f32(dh_n), "dc_n": f32(dc_n)})

    lstm = lstm.double()
    x64 = x.double().requires_grad_()
    packed = nn.utils.rnn.pack_padded_sequence(x64, torch.tensor(lengths), batch_first=True,
                                               enforce_sorted=False)
    out_p, (h_n, c_n) = lstm(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out_p, batch_first=True, total_length=T)
    loss = (out * dout.double()).sum() + (h_n * dh_n.double()).sum() + (c_n * dc_n.double()).sum()
    loss.backward()

    with torch.no_grad():
        ref = lstm_reference(x.double(), lengths, dict(lstm.named_parameters()), H, bidirectional)
    assert_close("lstm.out", out, ref[0])
    assert_close("lstm.h_n", h_n, ref[1])
    assert_close("lstm.c_n", c_n, ref[2])
    for b, L in enumerate(lengths):
        assert torch.equal(out[b, L:], torch.zeros_like(out[b, L:]))
        assert torch.equal(x64.grad[b, L:], torch.zeros_like(x64.grad[b, L:]))

    t.update({"out": f64(out), "h_n": f64(h_n), "c_n": f64(c_n), "grad.x": f64(x64.grad)})
    add_grads(t, lstm)
    fname = "lstm_bi.safetensors" if bidirectional else "lstm_uni.safetensors"
    write(out_dir, fname, t,
          meta("lstm", seed, input_size=I, hidden_size=H, num_layers=1, bidirectional=bidirectional,
               batch_first=True, batch=B, seq=T, lengths=lengths, gate_order="i,f,g,o",
               packing="pack_padded_sequence(enforce_sorted=False) + "
                       "pad_packed_sequence(total_length=seq)",
               loss="sum(out*dout)+sum(h_n*dh_n)+sum(c_n*dc_n)"), written)


def case_lstm_state(out_dir: Path, written: list[Path], bidirectional: bool, seed: int, layers: int = 1,
                    bias: bool = True) -> None:
    """nn.LSTM from a given initial state, lstm(packed, (h0, c0)), h0 and c0 (layers*dirs, B, H) in
    the batch's order; gradients into them too. layers > 1: stacked (num_layers), dropout 0.
    bias=False: no bias_ih / bias_hh in any layer."""
    B, T, I, H = 3, 6, 6, 5
    lengths = [4, 6, 2]
    dirs = 2 if bidirectional else 1
    torch.manual_seed(seed)
    lstm = nn.LSTM(input_size=I, hidden_size=H, batch_first=True, bidirectional=bidirectional, num_layers=layers,
                   bias=bias)
    x = randn32(B, T, I)
    h0 = randn32(layers * dirs, B, H)
    c0 = randn32(layers * dirs, B, H)
    dout = randn32(B, T, dirs * H)
    dh_n = randn32(layers * dirs, B, H)
    dc_n = randn32(layers * dirs, B, H)
    t = {"x": f32(x), "lengths": torch.tensor(lengths, dtype=torch.int64), "h0": f32(h0), "c0": f32(c0)}
    for n, p in lstm.named_parameters():
        t[n] = f32(p)
    t.update({"dout": f32(dout), "dh_n": f32(dh_n), "dc_n": f32(dc_n)})

    lstm = lstm.double()
    x64 = x.double().requires_grad_()
    h64 = h0.double().requires_grad_()
    c64 = c0.double().requires_grad_()
    packed = nn.utils.rnn.pack_padded_sequence(x64, torch.tensor(lengths), batch_first=True,
                                               enforce_sorted=False)
    out_p, (h_n, c_n) = lstm(packed, (h64, c64))
    out, _ = nn.utils.rnn.pad_packed_sequence(out_p, batch_first=True, total_length=T)
    loss = (out * dout.double()).sum() + (h_n * dh_n.double()).sum() + (c_n * dc_n.double()).sum()
    loss.backward()
    t.update({"out": f64(out), "h_n": f64(h_n), "c_n": f64(c_n), "grad.x": f64(x64.grad),
              "grad.h0": f64(h64.grad), "grad.c0": f64(c64.grad)})
    add_grads(t, lstm)
    fname = (("lstm_bi" if bidirectional else "lstm_uni") + (f"_{layers}layers" if layers > 1 else "") +
             ("" if bias else "_nobias") + "_state.safetensors")
    write(out_dir, fname, t,
          meta("lstm", seed, input_size=I, hidden_size=H, num_layers=layers, bidirectional=bidirectional,
               batch_first=True, batch=B, seq=T, lengths=lengths, gate_order="i,f,g,o",
               initial_state="(h0, c0), (num_layers*dirs, batch, hidden), batch order",
               packing="pack_padded_sequence(enforce_sorted=False) + "
                       "pad_packed_sequence(total_length=seq)",
               loss="sum(out*dout)+sum(h_n*dh_n)+sum(c_n*dc_n)", **({} if bias else {"bias": False})), written)


def gru_reference(x, lengths, p, hidden, bidirectional, layers, h0):
    """Per-sample loop of torch.nn.GRU's equations (gate order r, z, n):
    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z likewise, n = tanh(W_in x + b_in + r (W_hn h + b_hn)),
    h' = (1 - z) n + z h. Returns out [B,T,dirs*H] (the last layer's) and h_n [layers*dirs,B,H]."""
    B, T, _ = x.shape
    dirs = 2 if bidirectional else 1
    h_n = torch.zeros(layers * dirs, B, hidden, dtype=x.dtype)
    inp = x
    for layer in range(layers):
        out = torch.zeros(B, T, dirs * hidden, dtype=x.dtype)
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
            w_ih, w_hh = p["weight_ih" + sfx], p["weight_hh" + sfx]
            b_ih = p.get("bias_ih" + sfx, torch.zeros(3 * hidden, dtype=x.dtype))
            b_hh = p.get("bias_hh" + sfx, torch.zeros(3 * hidden, dtype=x.dtype))
            for b in range(B):
                h = h0[layer * dirs + d, b].clone() if h0 is not None else torch.zeros(hidden, dtype=x.dtype)
                steps = range(lengths[b]) if d == 0 else reversed(range(lengths[b]))
                for s in steps:
                    gi = w_ih @ inp[b, s] + b_ih
                    gh = w_hh @ h + b_hh
                    ir, iz, i_n = gi.chunk(3)
                    hr, hz, hn = gh.chunk(3)
                    r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
                    n = torch.tanh(i_n + r * hn)
                    h = (1 - z) * n + z * h
                    out[b, s, d * hidden:(d + 1) * hidden] = h
                h_n[layer * dirs + d, b] = h
        inp = out
    return out, h_n


def case_gru(out_dir: Path, written: list[Path], fname: str, bidirectional: bool, seed: int, layers: int = 1,
             bias: bool = True, state: bool = False) -> None:
    """nn.GRU on a packed, unsorted batch (enforce_sorted=False); state: from h0 (layers*dirs, B, H)
    in the batch's order, with its gradient. layers > 1: stacked, dropout 0. bias=False: no biases."""
    B, T, I, H = 3, 6, 6, 5
    lengths = [4, 6, 2]
    dirs = 2 if bidirectional else 1
    torch.manual_seed(seed)
    gru = nn.GRU(input_size=I, hidden_size=H, batch_first=True, bidirectional=bidirectional, num_layers=layers, bias=bias)
    x = randn32(B, T, I)
    h0 = randn32(layers * dirs, B, H) if state else None
    dout = randn32(B, T, dirs * H)
    dh_n = randn32(layers * dirs, B, H)
    t = {"x": f32(x), "lengths": torch.tensor(lengths, dtype=torch.int64)}
    if state:
        t["h0"] = f32(h0)
    for n, p in gru.named_parameters():
        t[n] = f32(p)
    t.update({"dout": f32(dout), "dh_n": f32(dh_n)})

    gru = gru.double()
    x64 = x.double().requires_grad_()
    h64 = h0.double().requires_grad_() if state else None
    packed = nn.utils.rnn.pack_padded_sequence(x64, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
    out_p, h_n = gru(packed, h64) if state else gru(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out_p, batch_first=True, total_length=T)
    loss = (out * dout.double()).sum() + (h_n * dh_n.double()).sum()
    loss.backward()

    with torch.no_grad():
        ref = gru_reference(x.double(), lengths, dict(gru.named_parameters()), H, bidirectional, layers,
                            h0.double() if state else None)
    assert_close("gru.out", out, ref[0])
    assert_close("gru.h_n", h_n, ref[1])
    for b, L in enumerate(lengths):
        assert torch.equal(out[b, L:], torch.zeros_like(out[b, L:]))
        assert torch.equal(x64.grad[b, L:], torch.zeros_like(x64.grad[b, L:]))

    t.update({"out": f64(out), "h_n": f64(h_n), "grad.x": f64(x64.grad)})
    if state:
        t["grad.h0"] = f64(h64.grad)
    add_grads(t, gru)
    write(out_dir, fname, t,
          meta("gru", seed, input_size=I, hidden_size=H, num_layers=layers, bidirectional=bidirectional,
               batch_first=True, batch=B, seq=T, lengths=lengths, gate_order="r,z,n", bias=bias,
               initial_state="h0 (num_layers*dirs, batch, hidden), batch order" if state else "none (zero)",
               packing="pack_padded_sequence(enforce_sorted=False) + pad_packed_sequence(total_length=seq)",
               loss="sum(out*dout)+sum(h_n*dh_n)"), written)


def case_rnn_cells(out_dir: Path, written: list[Path]) -> None:
    """nn.LSTMCell(6, 5) from a given (h0, c0) and nn.GRUCell(6, 5) from the zero state, two steps
    each, the second fed the first's state: loss = sum(h1*dh1) + sum(h2*dh2) (+ sum(c2*dc2) for the
    LSTM), so the gradients run back through the recurrence into x1, x2 and the initial state."""
    B, I, H = 3, 6, 5
    for fname, seed, kind in (("lstm_cell.safetensors", 42, "lstm"), ("gru_cell.safetensors", 43, "gru")):
        torch.manual_seed(seed)
        cell = nn.LSTMCell(I, H) if kind == "lstm" else nn.GRUCell(I, H)
        x1, x2 = randn32(B, I), randn32(B, I)
        h0, c0 = randn32(B, H), randn32(B, H)
        dh1, dh2, dc2 = randn32(B, H), randn32(B, H), randn32(B, H)
        t = {"x1": f32(x1), "x2": f32(x2), "dh1": f32(dh1), "dh2": f32(dh2)}
        for n, p in cell.named_parameters():
            t[n] = f32(p)
        cell = cell.double()
        x1d, x2d = x1.double().requires_grad_(), x2.double().requires_grad_()
        if kind == "lstm":
            t.update({"h0": f32(h0), "c0": f32(c0), "dc2": f32(dc2)})
            h0d, c0d = h0.double().requires_grad_(), c0.double().requires_grad_()
            h1, c1 = cell(x1d, (h0d, c0d))
            h2, c2 = cell(x2d, (h1, c1))
            loss = (h1 * dh1.double()).sum() + (h2 * dh2.double()).sum() + (c2 * dc2.double()).sum()
        else:
            h1 = cell(x1d)
            h2 = cell(x2d, h1)
            loss = (h1 * dh1.double()).sum() + (h2 * dh2.double()).sum()
        loss.backward()
        t.update({"h1": f64(h1), "h2": f64(h2), "grad.x1": f64(x1d.grad), "grad.x2": f64(x2d.grad)})
        if kind == "lstm":
            t.update({"c1": f64(c1), "c2": f64(c2), "grad.h0": f64(h0d.grad), "grad.c0": f64(c0d.grad)})
        add_grads(t, cell)
        write(out_dir, fname, t,
              meta(kind + "_cell", seed, input_size=I, hidden_size=H, batch=B, steps=2,
                   initial_state="(h0, c0)" if kind == "lstm" else "none (zero)",
                   loss="sum(h1*dh1)+sum(h2*dh2)" + ("+sum(c2*dc2)" if kind == "lstm" else "")), written)


# ----------------------------------------------------------------------------------------------
# 4. LayerNorm

def case_layernorm(out_dir: Path, written: list[Path]) -> None:
    seed = 4
    torch.manual_seed(seed)
    eps = 1e-5
    ln = nn.LayerNorm(8, eps=eps)
    with torch.no_grad():
        ln.weight.copy_(1.0 + randn32(8, scale=0.5))
        ln.bias.copy_(randn32(8, scale=0.5))
    x = randn32(2, 3, 8, scale=2.0) + 0.75
    dout = randn32(2, 3, 8)
    t = {"x": f32(x), "weight": f32(ln.weight), "bias": f32(ln.bias), "dout": f32(dout)}
    ln = ln.double()
    x64 = x.double().requires_grad_()
    out = ln(x64)
    (out * dout.double()).sum().backward()
    xd = x.double()
    mu = xd.mean(-1, keepdim=True)
    var = xd.var(-1, unbiased=False, keepdim=True)
    assert_close("layernorm.out", out,
                 (xd - mu) / torch.sqrt(var + eps) * t["weight"].double() + t["bias"].double())
    t.update({"out": f64(out), "grad.x": f64(x64.grad)})
    add_grads(t, ln)
    write(out_dir, "layernorm.safetensors", t,
          meta("layernorm", seed, normalized_shape=8, eps=eps, elementwise_affine=True,
               variance="biased (divide by N)", loss="sum(out*dout)"), written)


def case_rmsnorm(out_dir: Path, written: list[Path], fname: str, shape: tuple[int, ...], eps: float | None,
                 affine: bool, seed: int) -> None:
    """torch.nn.RMSNorm over the last axis; eps=None is the dtype's epsilon (float64's for the
    reference: attn's double test uses the same, its float test float32's)."""
    torch.manual_seed(seed)
    d = shape[-1]
    rms = nn.RMSNorm(d, eps=eps, elementwise_affine=affine)
    t = {}
    if affine:
        with torch.no_grad():
            rms.weight.copy_(1.0 + randn32(d, scale=0.5))
        t["weight"] = f32(rms.weight)
    x = randn32(*shape, scale=1.5) + 0.25
    dout = randn32(*shape)
    t.update({"x": f32(x), "dout": f32(dout)})
    rms = rms.double()
    x64 = x.double().requires_grad_()
    out = rms(x64)
    (out * dout.double()).sum().backward()
    xd = x.double()
    e = torch.finfo(torch.float64).eps if eps is None else eps
    ref = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + e)
    if affine:
        ref = ref * t["weight"].double()
    assert_close(fname + ".out", out, ref)
    t.update({"out": f64(out), "grad.x": f64(x64.grad)})
    add_grads(t, rms)
    write(out_dir, fname, t,
          meta(fname.removesuffix(".safetensors"), seed, normalized_shape=d, eps="None" if eps is None else eps,
               elementwise_affine=affine, loss="sum(out*dout)"), written)


# ----------------------------------------------------------------------------------------------
# 5. Embedding

def case_embedding(out_dir: Path, written: list[Path]) -> None:
    seed = 5
    torch.manual_seed(seed)
    V, E, pad = 11, 4, 0
    emb = nn.Embedding(V, E, padding_idx=pad)
    with torch.no_grad():
        # torch zero-initialises the padding row; a non-zero row shows that forward is a plain
        # lookup (torch never zeroes outputs at padding_idx, it only withholds the gradient).
        emb.weight.copy_(randn32(V, E))
    ids = torch.tensor([[3, 0, 7, 3, 10], [0, 5, 5, 1, 0]], dtype=torch.int64)
    dout = randn32(2, 5, E)
    t = {"ids": ids.clone(), "weight": f32(emb.weight), "dout": f32(dout)}
    emb = emb.double()
    out = emb(ids)
    (out * dout.double()).sum().backward()
    g = emb.weight.grad
    used = set(ids.flatten().tolist()) - {pad}
    for r in range(V):
        is_zero = torch.equal(g[r], torch.zeros(E, dtype=torch.float64))
        assert is_zero == (r not in used), f"embedding grad row {r}"
    assert_close("embedding.out", out, t["weight"].double()[ids])
    t.update({"out": f64(out), "grad.weight": f64(g)})
    write(out_dir, "embedding.safetensors", t,
          meta("embedding", seed, num_embeddings=V, embedding_dim=E, padding_idx=pad,
               unused_rows=",".join(str(r) for r in range(V) if r not in used),
               loss="sum(out*dout)"), written)


def case_embedding_max_norm(out_dir: Path, written: list[Path], seed: int) -> None:
    """nn.Embedding(max_norm=...): each looked-up row whose norm exceeds max_norm is rescaled in
    place before the lookup. Three tables, "p2." (max_norm 1.5, 2-norm), "p1." (max_norm 2, 1-norm)
    and "pinf." (max_norm 1, the largest |element|):
    the weights before and after one forward, the output and the weight's gradient."""
    torch.manual_seed(seed)
    V, E = 10, 4
    ids = torch.tensor([[3, 7, 7, 1, 9], [0, 3, 5, 8, 2], [9, 9, 4, 7, 0]], dtype=torch.int64)
    dout = randn32(3, 5, E)
    t = {"ids": ids.clone(), "dout": f32(dout)}
    for prefix, max_norm, norm_type in (("p2.", 1.5, 2.0), ("p1.", 2.0, 1.0), ("pinf.", 1.0, math.inf)):
        w = randn32(V, E, scale=1.2)
        w[4] = w[4] * 0.1  # a row under the limit
        w[6] = w[6] * 3.0  # an unused row above it
        emb = nn.Embedding(V, E, max_norm=max_norm, norm_type=norm_type).double()
        with torch.no_grad():
            emb.weight.copy_(w.double())
        out = emb(ids)
        (out * dout.double()).sum().backward()
        after = emb.weight.detach()
        for r in range(V):
            n = w[r].double().norm(p=norm_type)
            want = w[r].double() * (max_norm / (n + 1e-7)) if (r in ids) and n > max_norm else w[r].double()
            assert_close(f"embedding_max_norm.{prefix}row{r}", after[r], want)
        t.update({prefix + "weight": f32(w), prefix + "weight_after": f64(after), prefix + "out": f64(out),
                  prefix + "grad.weight": f64(emb.weight.grad)})
    write(out_dir, "embedding_max_norm.safetensors", t,
          meta("embedding max_norm", seed, num_embeddings=V, embedding_dim=E, p2="max_norm=1.5, norm_type=2",
               p1="max_norm=2, norm_type=1", pinf="max_norm=1, norm_type=inf", unused_rows="6 (above the limit, not rescaled)",
               loss="sum(out*dout)"), written)


# ----------------------------------------------------------------------------------------------
# 6. Cross-entropy

def case_cross_entropy(out_dir: Path, written: list[Path], smoothing: float, seed: int) -> None:
    torch.manual_seed(seed)
    N, C, ignore = 6, 5, -100
    logits = randn32(N, C, scale=2.0)
    targets = torch.tensor([2, ignore, 0, 4, ignore, 1], dtype=torch.int64)
    l64 = logits.double().requires_grad_()
    loss = F.cross_entropy(l64, targets, ignore_index=ignore, reduction="mean",
                           label_smoothing=smoothing)
    loss.backward()
    # hand-written check: mean over the non-ignored rows of
    # (1-eps) * -logp[y] + eps/C * sum_c -logp[c]
    keep = targets != ignore
    logp = torch.log_softmax(logits.double(), dim=-1)[keep]
    nll = -logp.gather(1, targets[keep][:, None]).squeeze(1)
    ref = ((1 - smoothing) * nll + smoothing / C * (-logp).sum(1)).mean()
    assert_close("cross_entropy.loss", loss, ref)
    assert torch.equal(l64.grad[~keep], torch.zeros_like(l64.grad[~keep]))
    t = {"logits": f32(logits), "targets": targets.clone(), "loss": f64(loss).reshape(1),
         "grad.logits": f64(l64.grad)}
    fname = "cross_entropy_ls.safetensors" if smoothing else "cross_entropy.safetensors"
    write(out_dir, fname, t,
          meta("cross_entropy", seed, classes=C, batch=N, ignore_index=ignore, reduction="mean",
               label_smoothing=smoothing, loss_shape="[1]",
               mean_over="non-ignored targets", counted=int(keep.sum())), written)


def case_cross_entropy_weighted(out_dir: Path, written: list[Path], seed: int) -> None:
    """Class weights (torch's `weight`), with and without label smoothing, with ignored rows and a
    class of weight 0."""
    torch.manual_seed(seed)
    N, C, ignore = 7, 5, -100
    logits = randn32(N, C, scale=2.0)
    targets = torch.tensor([2, ignore, 0, 4, 3, 1, 2], dtype=torch.int64)
    weight = torch.tensor([0.5, 2.0, 1.25, 0.0, 3.0], dtype=torch.float64)
    t = {"logits": f32(logits), "targets": targets.clone(), "weight": weight.clone()}
    keep = targets != ignore
    for tag, smoothing in (("", 0.0), ("_ls", 0.2)):
        l64 = logits.double().requires_grad_()
        loss = F.cross_entropy(l64, targets, weight=weight, ignore_index=ignore, reduction="mean",
                               label_smoothing=smoothing)
        loss.backward()
        # hand-written check: sum over the counted rows of (1-eps) w[y] (-logp[y]) + eps/C sum_c w[c]
        # (-logp[c]), divided by the sum of w[y] over the same rows
        logp = torch.log_softmax(logits.double(), dim=-1)[keep]
        y = targets[keep]
        nll = -logp.gather(1, y[:, None]).squeeze(1) * weight[y]
        smooth = (-logp * weight[None, :]).sum(1) / C
        ref = ((1 - smoothing) * nll + smoothing * smooth).sum() / weight[y].sum()
        assert_close("cross_entropy_weighted.loss" + tag, loss, ref)
        t["loss" + tag] = f64(loss).reshape(1)
        t["grad.logits" + tag] = f64(l64.grad)
    write(out_dir, "cross_entropy_weighted.safetensors", t,
          meta("cross_entropy_weighted", seed, classes=C, batch=N, ignore_index=ignore, reduction="mean",
               label_smoothing="0 (loss, grad.logits) and 0.2 (loss_ls, grad.logits_ls)", loss_shape="[1]",
               mean_over="non-ignored targets, weighted by weight[target]"), written)


# ----------------------------------------------------------------------------------------------
# 7. Optimizers

def adam_reference(p, grads, lr, b1, b2, eps, wd, decoupled):
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    out = []
    for step, g in enumerate(grads, start=1):
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mhat = m / (1 - b1 ** step)
        vhat = v / (1 - b2 ** step)
        p = p - lr * mhat / (vhat.sqrt() + eps)
        out.append(p)
    return out, m, v


def sgd_reference(p, grads, lr, mom, wd, dampening=0.0, nesterov=False):
    buf = None
    out = []
    for g in grads:
        g = g + wd * p
        buf = g.clone() if buf is None else mom * buf + (1 - dampening) * g
        step = g + mom * buf if nesterov else buf
        p = p - lr * step
        out.append(p)
    return out, buf


def case_optimizer(out_dir: Path, written: list[Path], kind: str, seed: int) -> None:
    torch.manual_seed(seed)
    lr, betas, eps, wd = 0.01, (0.9, 0.999), 1e-8, 0.1
    p0 = randn32(4, 3)
    grads = [randn32(4, 3) for _ in range(3)]
    p = nn.Parameter(p0.double().clone())
    if kind == "adam":
        opt = torch.optim.Adam([p], lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=False)
        hp = dict(lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=wd,
                  weight_decay_mode="L2 (wd*param added to the gradient)", amsgrad=False)
    elif kind == "adamw":
        opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=False)
        hp = dict(lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=wd,
                  weight_decay_mode="decoupled (param *= 1 - lr*wd before the Adam step)",
                  amsgrad=False)
    else:
        wd = 0.01
        damp = 0.5 if kind == "sgd_dampening" else 0.0
        nesterov = kind == "sgd_nesterov"
        opt = torch.optim.SGD([p], lr=lr, momentum=0.9, dampening=damp, weight_decay=wd,
                              nesterov=nesterov, foreach=False)
        hp = dict(lr=lr, momentum=0.9, dampening=damp, weight_decay=wd, nesterov=nesterov,
                  weight_decay_mode="L2 (wd*param added to the gradient)",
                  first_step="momentum_buffer = grad (no dampening)")
    t = {"param_init": f32(p0)}
    for k, g in enumerate(grads, start=1):
        t[f"grad_step{k}"] = f32(g)
    steps = []
    for k, g in enumerate(grads, start=1):
        p.grad = g.double().clone()
        opt.step()
        steps.append(p.detach().clone())
        t[f"param_step{k}"] = f64(p)
        st = opt.state[p]
        if kind.startswith("sgd"):
            t[f"momentum_buffer_step{k}"] = f64(st["momentum_buffer"])
        else:
            t[f"exp_avg_step{k}"] = f64(st["exp_avg"])
            t[f"exp_avg_sq_step{k}"] = f64(st["exp_avg_sq"])
    gd = [g.double() for g in grads]
    if kind.startswith("sgd"):
        ref, buf = sgd_reference(p0.double(), gd, lr, 0.9, wd, dampening=hp["dampening"], nesterov=hp["nesterov"])
        assert_close(f"{kind}.momentum_buffer", t["momentum_buffer_step3"], buf)
    else:
        ref, m, v = adam_reference(p0.double(), gd, lr, betas[0], betas[1], eps, wd,
                                   decoupled=(kind == "adamw"))
        assert_close(f"{kind}.exp_avg", t["exp_avg_step3"], m)
        assert_close(f"{kind}.exp_avg_sq", t["exp_avg_sq_step3"], v)
    for k in range(3):
        assert_close(f"{kind}.param_step{k + 1}", steps[k], ref[k])
    write(out_dir, f"{kind}.safetensors", t, meta(kind, seed, steps=3, **hp), written)


def case_pooling(out_dir: Path, written: list[Path], seed: int) -> None:
    """The mean and the maximum over the real positions of a padded batch (B, T, D), lengths
    unsorted, in float64, with the gradient of sum(mean * upstream_mean) + sum(max * upstream_max)."""
    torch.manual_seed(seed)
    B, T, D = 3, 5, 4
    lengths = [3, 5, 1]
    x0 = randn32(B, T, D)
    up_mean, up_max = randn32(B, D), randn32(B, D)
    keep = mask_from_lengths(lengths, T) > 0.5  # (B, T) bool, True = real token
    x = x0.double().clone().requires_grad_(True)
    k = keep.unsqueeze(-1).to(torch.float64)
    mean = (x * k).sum(1) / k.sum(1)
    mx = x.masked_fill(~keep.unsqueeze(-1), float("-inf")).max(1).values
    ((mean * up_mean.double()).sum() + (mx * up_max.double()).sum()).backward()
    t = {"x": f32(x0), "lengths": i64(torch.tensor(lengths)), "upstream_mean": f32(up_mean), "upstream_max": f32(up_max),
         "mean": f64(mean.detach()), "max": f64(mx.detach()), "grad.x": f64(x.grad)}
    write(out_dir, "pooling.safetensors", t, meta("masked mean and max pooling", seed, B=B, T=T, D=D), written)


ACTIVATIONS = {
    # name: (input, torch function); the inputs hold the kinks (0, the hardtanh ends, softplus's
    # threshold on both sides), where the result is torch's convention for the gradient
    "relu": ("x", F.relu),
    "relu6": ("x", F.relu6),
    "leaky_relu_0.2": ("x", lambda v: F.leaky_relu(v, 0.2)),
    "elu_0.5": ("x", lambda v: F.elu(v, 0.5)),
    "selu": ("x", F.selu),
    "gelu": ("x", F.gelu),
    "gelu_tanh": ("x", lambda v: F.gelu(v, approximate="tanh")),
    "silu": ("x", F.silu),
    "mish": ("x", F.mish),
    "softplus": ("x", F.softplus),
    "softplus_2_5": ("x", lambda v: F.softplus(v, beta=2.0, threshold=5.0)),
    "hardtanh_-0.5_2": ("x", lambda v: F.hardtanh(v, -0.5, 2.0)),
    "sigmoid": ("x", torch.sigmoid),
    "log_sigmoid": ("x", F.logsigmoid),
    "tanh": ("x", torch.tanh),
    "abs": ("x", torch.abs),
    "sqrt": ("x_pos", torch.sqrt),
}


def case_activations(out_dir: Path, written: list[Path], seed: int) -> None:
    """Element-wise activations of torch.nn.functional in float64, each with the gradient of
    sum(out * dout)."""
    torch.manual_seed(seed)
    x = torch.cat([torch.linspace(-6, 6, 49), torch.tensor([-30.0, -12.0, 2.4, 2.6, 12.0, 30.0])]).to(torch.float32)
    x_pos = x.abs() + 0.125
    dout = randn32(x.numel())
    t = {"x": f32(x), "x_pos": f32(x_pos), "dout": f32(dout)}
    inputs = {"x": x, "x_pos": x_pos}
    for name, (which, fn) in ACTIVATIONS.items():
        v = inputs[which].double().clone().requires_grad_(True)
        out = fn(v)
        (out * dout.double()).sum().backward()
        t["out." + name] = f64(out.detach())
        t["grad." + name] = f64(v.grad)
    write(out_dir, "activations.safetensors", t,
          meta("activations", seed, functions=list(ACTIVATIONS), loss="sum(out*dout)"), written)


def case_sparse_adam(out_dir: Path, written: list[Path], seed: int) -> None:
    """nn.Embedding(6, 3, padding_idx=0, sparse=True) + torch.optim.SparseAdam over three steps;
    each step's loss is sum(emb(ids) * upstream), with repeated ids and padding."""
    torch.manual_seed(seed)
    lr, betas, eps = 0.01, (0.9, 0.999), 1e-8
    emb = nn.Embedding(6, 3, padding_idx=0, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(randn32(6, 3))
    t = {"weight_init": f32(emb.weight.detach())}
    ids = [torch.tensor([[1, 2, 2], [0, 4, 1]]), torch.tensor([[5, 5, 0], [0, 0, 0]]), torch.tensor([[2, 3, 4], [1, 0, 3]])]
    opt = torch.optim.SparseAdam(emb.parameters(), lr=lr, betas=betas, eps=eps)
    for k, idk in enumerate(ids, start=1):
        up = randn32(2, 3, 3)
        opt.zero_grad()
        (emb(idk) * up).sum().backward()
        assert emb.weight.grad.is_sparse
        opt.step()
        t[f"ids_step{k}"] = i64(idk)
        t[f"upstream_step{k}"] = f32(up)
        t[f"weight_step{k}"] = f32(emb.weight.detach())
        t[f"exp_avg_step{k}"] = f32(opt.state[emb.weight]["exp_avg"])
        t[f"exp_avg_sq_step{k}"] = f32(opt.state[emb.weight]["exp_avg_sq"])
    untouched = t["weight_step3"][5] - t["weight_step2"][5]
    assert float(untouched.abs().max()) == 0.0, "row 5 is not looked up in step 3"
    write(out_dir, "sparse_adam.safetensors", t,
          meta("sparse_adam", seed, steps=3, lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, padding_idx=0,
               update="SparseAdam: looked-up rows only, eps added to sqrt(exp_avg_sq)"), written)


# ----------------------------------------------------------------------------------------------
# 8. Weight round trip

class RoundTripModel(nn.Module):
    """nn.MultiheadAttention(16, 2) as "attn" plus a bidirectional nn.LSTM(6, 5) as "lstm"."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.lstm = nn.LSTM(6, 5, batch_first=True, bidirectional=True)


ROUNDTRIP_META = dict(attn_embed_dim=16, attn_num_heads=2, lstm_input_size=6, lstm_hidden_size=5,
                      lstm_bidirectional=True, lstm_num_layers=1, dtype="F32")


def case_roundtrip(out_dir: Path, written: list[Path]) -> None:
    seed = 8
    torch.manual_seed(seed)
    model = RoundTripModel()
    with torch.no_grad():
        model.attn.in_proj_bias.copy_(randn32(48, scale=0.5))
        model.attn.out_proj.bias.copy_(randn32(16, scale=0.5))
    sd = {k: f32(v) for k, v in model.state_dict().items()}
    write(out_dir, "roundtrip_torch.safetensors", sd, meta("roundtrip", seed, **ROUNDTRIP_META),
          written)


def check_attn(in_path: str, out_path: str, expect_golden: bool) -> int:
    """Loads a file written by attn into RoundTripModel (strict), saves the state_dict to out_path."""
    try:
        sd = load_file(in_path)
    except Exception as e:  # noqa: BLE001 - report any reader failure as a failed check
        print(f"check-attn: cannot read {in_path}: {e}", file=sys.stderr)
        return 1
    model = RoundTripModel()
    expected = model.state_dict()
    problems = []
    for k, v in sd.items():
        if k not in expected:
            problems.append(f"unexpected key {k}")
        elif tuple(v.shape) != tuple(expected[k].shape):
            problems.append(f"{k}: shape {list(v.shape)}, torch wants {list(expected[k].shape)}")
    for k in expected:
        if k not in sd:
            problems.append(f"missing key {k}")
    if problems:
        for p in problems:
            print(f"check-attn: {in_path}: {p}", file=sys.stderr)
        return 1
    model.load_state_dict(sd, strict=True)
    golden_path = HERE / "roundtrip_torch.safetensors"
    golden = load_file(str(golden_path)) if golden_path.exists() else {}
    differs = 0
    for k in sorted(sd):
        v = sd[k]
        line = f"  {k:32s} {str(v.dtype).replace('torch.', ''):8s} {list(v.shape)}"
        if k in golden:
            d = (v.double() - golden[k].double()).abs().max().item()
            line += "  == roundtrip_torch" if d == 0.0 else f"  differs from roundtrip_torch by {d:.3e}"
            differs += d != 0.0
        print(line)
    print(f"check-attn: {len(sd)} tensors matched torch's names and shapes (strict load ok)")
    save_file({k: f32(v) for k, v in model.state_dict().items()}, out_path,
              metadata=meta("roundtrip_check", 0, source=Path(in_path).name, **ROUNDTRIP_META))
    canonicalize_header(Path(out_path))
    print(f"check-attn: wrote {out_path}")
    if expect_golden and (differs or not golden):
        print(f"check-attn: {differs} tensor(s) differ from roundtrip_torch.safetensors (or it is missing)",
              file=sys.stderr)
        return 2
    return 0


# ----------------------------------------------------------------------------------------------
# 9. Transformer encoder

def redraw_transformer_parameters(model: nn.Module) -> None:
    """Every parameter of a Transformer module redrawn, in registration order: matrices with
    scale 1/sqrt(fan_in), norm weights near 1, the rest (biases) at scale 0.5. (The stacks' layers
    start as copies of one layer; torch zeroes the attention biases and starts the norms at ones
    and zeros: the goldens should see none of that.)"""
    for n, q in model.named_parameters():
        if q.dim() == 2:
            q.copy_(randn32(*q.shape, scale=1.0 / math.sqrt(q.shape[1])))
        elif "norm" in n and n.endswith("weight"):
            q.copy_(1.0 + randn32(*q.shape, scale=0.2))
        else:
            q.copy_(randn32(*q.shape, scale=0.5))


def torch_activation(name: str):
    """The activation argument of torch's transformer layers for attn's nn::Activation name: the
    string torch knows ("relu", "gelu"), else the callable."""
    return {"relu": "relu", "gelu": "gelu",
            "gelu_tanh": lambda h: F.gelu(h, approximate="tanh"), "silu": F.silu}[name]


def activation_reference(h, name: str):
    """The feed-forward activation written out."""
    if name == "relu":
        return h.clamp_min(0)
    if name == "gelu":
        return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    if name == "gelu_tanh":
        return 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    assert name == "silu", name
    return h / (1 + torch.exp(-h))


def encoder_layer_reference(x, p, prefix, heads, key_valid, norm_first, activation, eps, rms=False, gated=False):
    """Hand-written torch.nn.TransformerEncoderLayer (dropout 0) on parameters p[prefix + name]
    (a bias that p lacks, bias=False, adds nothing). rms: RMS norms (weight only); gated: linear1
    gives 2F, the activated first half times the second (SwiGLU with silu)."""
    def b(n):
        return p.get(prefix + n, 0.0)

    def ln(z, n):
        if rms:
            return z / torch.sqrt((z * z).mean(-1, keepdim=True) + eps) * p[prefix + n + ".weight"]
        mu = z.mean(-1, keepdim=True)
        var = z.var(-1, unbiased=False, keepdim=True)
        return (z - mu) / torch.sqrt(var + eps) * p[prefix + n + ".weight"] + b(n + ".bias")

    def sa(z):
        return mha_reference(z, p[prefix + "self_attn.in_proj_weight"], b("self_attn.in_proj_bias"),
                             p[prefix + "self_attn.out_proj.weight"], b("self_attn.out_proj.bias"),
                             heads, key_valid)[0]

    def ff(z):
        h = z @ p[prefix + "linear1.weight"].T + b("linear1.bias")
        if gated:
            g, u = h.chunk(2, dim=-1)
            h = activation_reference(g, activation) * u
        else:
            h = activation_reference(h, activation)
        return h @ p[prefix + "linear2.weight"].T + b("linear2.bias")

    if norm_first:
        x = x + sa(ln(x, "norm1"))
        return x + ff(ln(x, "norm2"))
    x = ln(x + sa(x), "norm1")
    return ln(x + ff(x), "norm2")


def run_encoder_model(fname: str, model: nn.Module, B: int, T: int, D: int, lengths: list[int], run, reference) -> dict:
    """The encoder goldens' common part: redraws model's parameters, draws x and dout (B, T, D), runs
    run(model, x, key_valid) in double (training mode: dropout is 0, and torch stays off its fused
    inference path), checks its output and every gradient against reference(x, leaves, key_valid)
    on copies of the parameters, and returns the tensors to write: x, mask, the parameters, dout,
    out, grad.x and grad.<parameter>."""
    with torch.no_grad():
        redraw_transformer_parameters(model)
    x = randn32(B, T, D)
    dout = randn32(B, T, D)
    mask = mask_from_lengths(lengths, T)
    key_valid = mask.bool()
    t = {"x": f32(x), "mask": mask}
    for n, q in model.named_parameters():
        t[n] = f32(q)
    t["dout"] = f32(dout)

    model = model.double()
    model.train()
    d64 = dout.double()
    x64 = x.double().requires_grad_()
    out = run(model, x64, key_valid)
    (out * d64).sum().backward()

    # the hand-written reference: output and every gradient
    leaves = {n: q.detach().clone().requires_grad_() for n, q in model.named_parameters()}
    xr = x.double().requires_grad_()
    z = reference(xr, leaves, key_valid)
    (z * d64).sum().backward()
    assert_close(f"{fname}.out", out, z)
    assert_close(f"{fname}.grad.x", x64.grad, xr.grad)
    for n, q in model.named_parameters():
        assert_close(f"{fname}.grad.{n}", q.grad, leaves[n].grad)

    t.update({"out": f64(out), "grad.x": f64(x64.grad)})
    add_grads(t, model)
    return t


def case_encoder(out_dir: Path, written: list[Path], fname: str, layers: int, norm_first: bool,
                 activation: str, final_norm: bool, seed: int, bias: bool = True) -> None:
    """layers == 0: one nn.TransformerEncoderLayer; else nn.TransformerEncoder of that many.
    bias=False: no bias anywhere, the norms' included (torch >= 2.1)."""
    B, T, D, H, FF, eps = 2, 5, 16, 4, 32, 1e-5
    lengths = [5, 3]
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(d_model=D, nhead=H, dim_feedforward=FF, dropout=0.0,
                                       activation=torch_activation(activation), layer_norm_eps=eps, batch_first=True,
                                       norm_first=norm_first, bias=bias)
    if layers == 0:
        model: nn.Module = layer
    else:
        model = nn.TransformerEncoder(layer, num_layers=layers,
                                      norm=nn.LayerNorm(D, eps=eps, bias=bias) if final_norm else None,
                                      enable_nested_tensor=False)
    def reference(z, leaves, key_valid):
        for pre in ([""] if layers == 0 else [f"layers.{i}." for i in range(layers)]):
            z = encoder_layer_reference(z, leaves, pre, H, key_valid, norm_first, activation, eps)
        if layers and final_norm:
            mu = z.mean(-1, keepdim=True)
            var = z.var(-1, unbiased=False, keepdim=True)
            z = (z - mu) / torch.sqrt(var + eps) * leaves["norm.weight"] + leaves.get("norm.bias", 0.0)
        return z

    t = run_encoder_model(fname, model, B, T, D, lengths,
                          lambda m, x, key_valid: m(x, src_key_padding_mask=~key_valid), reference)
    write(out_dir, fname, t,
          meta("transformer_encoder_layer" if layers == 0 else "transformer_encoder", seed,
               d_model=D, nhead=H, dim_feedforward=FF, dropout=0.0, activation=activation,
               layer_norm_eps=eps, batch_first=True, norm_first=norm_first, num_layers=max(layers, 1),
               final_norm=bool(layers and final_norm), batch=B, seq=T, lengths=lengths,
               padded_rows="computed (torch's training path)", loss="sum(out*dout)",
               **({} if bias else {"bias": False})), written)


def case_encoder_gated_rms(out_dir: Path, written: list[Path], fname: str, layers: int, norm_first: bool, bias: bool,
                           seed: int) -> None:
    """attn's TransformerEncoderLayer with {.activation = silu, .norm = rms, .gated = true}: torch's
    nn.RMSNorm for both norms and a SwiGLU feed-forward whose linear1 (2F, D) holds the gate's rows
    first and the up projection's after (Phi-3's gate_up_proj), built from torch's own modules
    (nn.MultiheadAttention, nn.RMSNorm, nn.Linear, F.silu); layers > 0: that many, then a final
    RMSNorm "norm". Checked against the hand-written reference."""
    B, T, D, H, FF, eps = 2, 5, 16, 4, 24, 1e-5
    lengths = [5, 3]
    torch.manual_seed(seed)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = nn.MultiheadAttention(D, H, dropout=0.0, bias=bias, batch_first=True)
            self.linear1 = nn.Linear(D, 2 * FF, bias=bias)
            self.linear2 = nn.Linear(FF, D, bias=bias)
            self.norm1 = nn.RMSNorm(D, eps=eps)
            self.norm2 = nn.RMSNorm(D, eps=eps)

        def ff(self, z):
            g, u = self.linear1(z).chunk(2, dim=-1)
            return self.linear2(F.silu(g) * u)

        def sa(self, z, pad):
            return self.self_attn(z, z, z, key_padding_mask=pad, need_weights=False)[0]

        def forward(self, x, pad):
            if norm_first:
                x = x + self.sa(self.norm1(x), pad)
                return x + self.ff(self.norm2(x))
            x = self.norm1(x + self.sa(x, pad))
            return self.norm2(x + self.ff(x))

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Layer() for _ in range(layers)])
            self.norm = nn.RMSNorm(D, eps=eps)

        def forward(self, x, pad):
            for layer in self.layers:
                x = layer(x, pad)
            return self.norm(x)

    def reference(z, leaves, key_valid):
        for pre in ([""] if layers == 0 else [f"layers.{i}." for i in range(layers)]):
            z = encoder_layer_reference(z, leaves, pre, H, key_valid, norm_first, "silu", eps, rms=True, gated=True)
        if layers:
            z = z / torch.sqrt((z * z).mean(-1, keepdim=True) + eps) * leaves["norm.weight"]
        return z

    t = run_encoder_model(fname, Layer() if layers == 0 else Stack(), B, T, D, lengths,
                          lambda m, x, key_valid: m(x, ~key_valid), reference)
    write(out_dir, fname, t,
          meta("transformer_encoder_layer" if layers == 0 else "transformer_encoder", seed,
               d_model=D, nhead=H, dim_feedforward=FF, dropout=0.0, activation="silu", norm="rms", gated=True,
               layer_norm_eps=eps, batch_first=True, norm_first=norm_first, num_layers=max(layers, 1),
               final_norm=bool(layers), batch=B, seq=T, lengths=lengths, loss="sum(out*dout)",
               **({} if bias else {"bias": False})), written)


# ----------------------------------------------------------------------------------------------

def case_decoder(out_dir: Path, written: list[Path], fname: str, layers: int, norm_first: bool,
                 activation: str, final_norm: bool, causal: bool, memory_mask: bool, seed: int) -> None:
    """layers == 0: one nn.TransformerDecoderLayer; else nn.TransformerDecoder of that many.
    causal: tgt_is_causal with the causal tgt_mask (attn's causal option). memory_mask: an additive
    (T, S) mask with some -inf, stored as "memory_mask"."""
    B, T, S, D, H, FF, eps = 3, 5, 6, 16, 4, 32, 1e-5
    tgt_lengths, mem_lengths = [5, 3, 4], [6, 2, 5]
    torch.manual_seed(seed)
    layer = nn.TransformerDecoderLayer(d_model=D, nhead=H, dim_feedforward=FF, dropout=0.0,
                                       activation=torch_activation(activation), layer_norm_eps=eps, batch_first=True,
                                       norm_first=norm_first)
    if layers == 0:
        model: nn.Module = layer
    else:
        model = nn.TransformerDecoder(layer, num_layers=layers,
                                      norm=nn.LayerNorm(D, eps=eps) if final_norm else None)
    with torch.no_grad():
        redraw_transformer_parameters(model)
    tgt = randn32(B, T, D)
    memory = randn32(B, S, D)
    dout = randn32(B, T, D)
    tgt_keep = mask_from_lengths(tgt_lengths, T)
    mem_keep = mask_from_lengths(mem_lengths, S)
    t = {"tgt": f32(tgt), "memory": f32(memory), "tgt_key_mask": tgt_keep, "memory_key_mask": mem_keep}
    mm = None
    if memory_mask:
        mm = randn32(T, S, scale=0.5)
        mm[0, 1] = mm[3, 0] = mm[4, 4] = float("-inf")
        t["memory_mask"] = mm.clone()
    for n, q in model.named_parameters():
        t[n] = f32(q)
    t["dout"] = f32(dout)

    model = model.double()
    model.train()  # dropout is 0
    tgt64 = tgt.double().requires_grad_()
    mem64 = memory.double().requires_grad_()
    tkpm = torch.zeros(B, T, dtype=torch.float64).masked_fill(~tgt_keep.bool(), float("-inf"))
    mkpm = torch.zeros(B, S, dtype=torch.float64).masked_fill(~mem_keep.bool(), float("-inf"))
    causal_mask = torch.zeros(T, T, dtype=torch.float64).masked_fill(
        torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")) if causal else None
    out = model(tgt64, mem64, tgt_mask=causal_mask, memory_mask=mm.double() if mm is not None else None,
                tgt_key_padding_mask=tkpm, memory_key_padding_mask=mkpm, tgt_is_causal=causal)
    (out * dout.double()).sum().backward()
    t.update({"out": f64(out), "grad.tgt": f64(tgt64.grad), "grad.memory": f64(mem64.grad)})
    add_grads(t, model)
    md = meta("transformer_decoder_layer" if layers == 0 else "transformer_decoder", seed,
              d_model=D, nhead=H, dim_feedforward=FF, dropout=0.0, activation=activation,
              layer_norm_eps=eps, batch_first=True, norm_first=norm_first, num_layers=max(layers, 1),
              final_norm=bool(layers and final_norm), batch=B, tgt_len=T, memory_len=S,
              tgt_lengths=tgt_lengths, memory_lengths=mem_lengths,
              tgt_mask="causal (tgt_is_causal=True): attn's causal option" if causal else "none",
              memory_mask="additive (T, S)" if memory_mask else "none", loss="sum(out*dout)")
    if causal:
        md["causal"] = "true"
    write(out_dir, fname, t, md, written)


def case_transformer(out_dir: Path, written: list[Path], seed: int) -> None:
    """nn.Transformer (2 encoder layers, 1 decoder layer, post-norm relu), src and tgt padded, the
    causal tgt_mask, the source's padding as memory_key_padding_mask too (attn's Transformer applies
    the source mask to the memory)."""
    B, S, T, D, H, FF, eps = 2, 6, 5, 16, 4, 32, 1e-5
    src_lengths, tgt_lengths = [6, 4], [5, 3]
    torch.manual_seed(seed)
    model = nn.Transformer(d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=FF,
                           dropout=0.0, activation="relu", layer_norm_eps=eps, batch_first=True, norm_first=False)
    with torch.no_grad():
        redraw_transformer_parameters(model)
    src, tgt, dout = randn32(B, S, D), randn32(B, T, D), randn32(B, T, D)
    src_keep, tgt_keep = mask_from_lengths(src_lengths, S), mask_from_lengths(tgt_lengths, T)
    t = {"src": f32(src), "tgt": f32(tgt), "src_key_mask": src_keep, "tgt_key_mask": tgt_keep}
    for n, q in model.named_parameters():
        t[n] = f32(q)
    t["dout"] = f32(dout)
    model = model.double()
    model.train()  # dropout is 0; training mode keeps torch off its fused inference fast path
    src64, tgt64 = src.double().requires_grad_(), tgt.double().requires_grad_()
    skpm = torch.zeros(B, S, dtype=torch.float64).masked_fill(~src_keep.bool(), float("-inf"))
    tkpm = torch.zeros(B, T, dtype=torch.float64).masked_fill(~tgt_keep.bool(), float("-inf"))
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    out = model(src64, tgt64, tgt_mask=causal, src_key_padding_mask=skpm, tgt_key_padding_mask=tkpm,
                memory_key_padding_mask=skpm, tgt_is_causal=True)
    (out * dout.double()).sum().backward()
    t.update({"out": f64(out), "grad.src": f64(src64.grad), "grad.tgt": f64(tgt64.grad)})
    add_grads(t, model)
    write(out_dir, "transformer.safetensors", t,
          meta("transformer", seed, d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=1,
               dim_feedforward=FF, dropout=0.0, activation="relu", layer_norm_eps=eps, batch_first=True,
               norm_first=False, batch=B, src_len=S, tgt_len=T, src_lengths=src_lengths, tgt_lengths=tgt_lengths,
               tgt_mask="generate_square_subsequent_mask (tgt_is_causal=True)",
               memory_key_padding_mask="src_key_padding_mask", loss="sum(out*dout)"), written)


# ----------------------------------------------------------------------------------------------
# Dynamic int8 quantization (torch.ao.quantization.quantize_dynamic, per-channel weights)

def case_quantized_dynamic(out_dir: Path, written: list[Path], seed: int) -> None:
    """A Linear and a bidirectional LSTM, FP32 and quantized the way torch quantizes for serving.

    torch quantizes each weight per output channel (symmetric, scale max|w| / 127.5) and each
    activation per tensor at run time (uint8 with reduce_range: 7 bits); attn quantizes the weights
    the same way and the activations per row. The test checks the int8 weights exactly and the
    outputs within the bound the two activation steps give (the LSTM: within twice torch's own
    error, its recurrence having no closed bound)."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    torch.manual_seed(seed)
    lin = nn.Linear(64, 24)
    lstm = nn.LSTM(16, 12, batch_first=True, bidirectional=True)
    x = randn32(3, 10, 64) * torch.tensor([0.2, 1.0, 4.0]).view(3, 1, 1)  # rows of different ranges
    x2 = randn32(3, 9, 16)
    t = {"x": f32(x), "weight": f32(lin.weight), "bias": f32(lin.bias), "lstm.x": f32(x2)}
    for n, p in lstm.named_parameters():
        t["lstm." + n] = f32(p)

    class Both(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.lstm = lin, lstm

    q = quantize_dynamic(Both().eval(), {nn.Linear: per_channel_dynamic_qconfig, nn.LSTM: per_channel_dynamic_qconfig},
                         dtype=torch.qint8)
    qw = q.lin.weight()
    assert qw.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric)
    with torch.no_grad():
        t["weight_q"] = i64(qw.int_repr())
        t["weight_scale"] = f64(qw.q_per_channel_scales())
        inv = 1 / (lin.weight.abs().amax(1, keepdim=True) / 127.5)
        want_q = torch.clamp(torch.round(lin.weight * inv), -128, 127)
        assert torch.equal(want_q.to(torch.int64), t["weight_q"]), "torch's per-channel int8 is not round(w / (max|w| / 127.5))"
        t["out_q"] = f64(q.lin(x))
        t["out"] = f64(lin.double()(x.double()))
        t["lstm.out_q"] = f64(q.lstm(x2)[0])
        t["lstm.out"] = f64(lstm.double()(x2.double())[0])
    write(out_dir, "quantized_dynamic.safetensors", t,
          meta("quantized_dynamic", seed, in_features=64, out_features=24, lstm_input=16, lstm_hidden=12,
               bidirectional=True, qconfig="per_channel_dynamic_qconfig", engine=torch.backends.quantized.engine), written)


def generate(out_dir: Path) -> list[Path]:
    written: list[Path] = []
    case_linear(out_dir, written)
    for heads, dim, seed in [(1, 16, 21), (2, 16, 22), (8, 32, 23)]:
        case_mha(out_dir, written, heads, dim, seed, "")
        case_mha(out_dir, written, heads, dim, seed + 10, "attnmask")
    case_mha(out_dir, written, 2, 16, 41, "fullpad")
    case_mha(out_dir, written, 2, 16, 42, "causal")
    case_mha(out_dir, written, 4, 16, 45, "perhead")
    case_mha(out_dir, written, 4, 16, 46, "perhead_causal")
    case_mha_rotary(out_dir, written, "mha_rotary.safetensors", 2, 16, 8, 10000.0, False, False, seed=47)
    case_mha_rotary(out_dir, written, "mha_rotary_partial_interleaved_causal.safetensors", 2, 16, 4, 100.0, True, True, seed=48)
    case_mha_cross(out_dir, written, 4, 16, 16, 16, seed=43)
    case_mha_cross(out_dir, written, 2, 16, 12, 10, seed=44)
    case_lstm(out_dir, written, bidirectional=False, seed=31)
    case_lstm(out_dir, written, bidirectional=True, seed=32)
    case_lstm_state(out_dir, written, bidirectional=False, seed=33)
    case_lstm_state(out_dir, written, bidirectional=True, seed=34)
    case_lstm_state(out_dir, written, bidirectional=False, seed=35, layers=3)
    case_lstm_state(out_dir, written, bidirectional=True, seed=36, layers=2)
    case_lstm_state(out_dir, written, bidirectional=True, seed=37, layers=2, bias=False)
    case_rnn_cells(out_dir, written)
    case_gru(out_dir, written, "gru_uni.safetensors", bidirectional=False, seed=38)
    case_gru(out_dir, written, "gru_bi_state.safetensors", bidirectional=True, seed=39, state=True)
    case_gru(out_dir, written, "gru_uni_3layers_state.safetensors", bidirectional=False, seed=40, layers=3, state=True)
    case_gru(out_dir, written, "gru_bi_2layers_nobias_state.safetensors", bidirectional=True, seed=41, layers=2, bias=False,
             state=True)
    case_layernorm(out_dir, written)
    case_rmsnorm(out_dir, written, "rmsnorm.safetensors", (2, 3, 8), None, True, seed=81)
    case_rmsnorm(out_dir, written, "rmsnorm_eps_plain.safetensors", (5, 6), 0.01, False, seed=82)
    case_embedding(out_dir, written)
    case_embedding_max_norm(out_dir, written, seed=6)
    case_cross_entropy(out_dir, written, 0.0, seed=61)
    case_cross_entropy(out_dir, written, 0.1, seed=62)
    case_cross_entropy_weighted(out_dir, written, seed=63)
    case_optimizer(out_dir, written, "adam", seed=71)
    case_optimizer(out_dir, written, "adamw", seed=72)
    case_optimizer(out_dir, written, "sgd_momentum", seed=73)
    case_optimizer(out_dir, written, "sgd_nesterov", seed=75)
    case_optimizer(out_dir, written, "sgd_dampening", seed=76)
    case_pooling(out_dir, written, seed=77)
    case_activations(out_dir, written, seed=78)
    case_sparse_adam(out_dir, written, seed=74)
    case_roundtrip(out_dir, written)
    case_encoder(out_dir, written, "encoder_layer_post_relu.safetensors", 0, False, "relu", False, seed=91)
    case_encoder(out_dir, written, "encoder_layer_pre_gelu.safetensors", 0, True, "gelu", False, seed=92)
    case_encoder(out_dir, written, "encoder_stack.safetensors", 2, True, "gelu", True, seed=93)
    case_encoder(out_dir, written, "encoder_stack_nobias.safetensors", 2, False, "relu", True, seed=94, bias=False)
    case_decoder(out_dir, written, "decoder_layer_post_relu.safetensors", 0, False, "relu", False, True, True, seed=95)
    case_decoder(out_dir, written, "decoder_layer_pre_gelu.safetensors", 0, True, "gelu", False, False, False, seed=96)
    case_decoder(out_dir, written, "decoder_stack.safetensors", 2, True, "gelu", True, True, False, seed=97)
    case_encoder(out_dir, written, "encoder_layer_post_gelu_tanh.safetensors", 0, False, "gelu_tanh", False, seed=102)
    case_encoder(out_dir, written, "encoder_stack_pre_silu.safetensors", 2, True, "silu", True, seed=103)
    case_decoder(out_dir, written, "decoder_layer_pre_silu.safetensors", 0, True, "silu", False, True, False, seed=104)
    case_encoder_gated_rms(out_dir, written, "encoder_layer_post_rms_swiglu.safetensors", 0, False, True, seed=105)
    case_encoder_gated_rms(out_dir, written, "encoder_stack_pre_rms_swiglu_nobias.safetensors", 2, True, False, seed=106)
    case_transformer(out_dir, written, seed=98)
    case_quantized_dynamic(out_dir, written, seed=101)
    return written


def verify(paths: list[Path]) -> None:
    """Every file loads back, is small, and carries metadata."""
    from safetensors import safe_open
    total = 0
    for p in paths:
        size = p.stat().st_size
        total += size
        assert size < MAX_FILE_BYTES, f"{p.name}: {size} bytes"
        tensors = load_file(str(p))
        with safe_open(str(p), framework="pt") as f:
            md = f.metadata()
        assert md and "case" in md, f"{p.name}: no metadata"
        dtypes = sorted({str(t.dtype).replace("torch.", "") for t in tensors.values()})
        print(f"  {p.name:32s} {size:7d} B  {len(tensors):2d} tensors  {','.join(dtypes)}")
    assert total < MAX_TOTAL_BYTES, f"total {total} bytes"
    print(f"  total {total} B in {len(paths)} files")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: beside this script)")
    ap.add_argument("--check-attn", nargs=2, metavar=("IN", "OUT"),
                    help="load an attn-written safetensors file into the torch round-trip model "
                         "(strict), then save its state_dict to OUT")
    ap.add_argument("--expect-golden", action="store_true",
                    help="with --check-attn: exit 2 unless every tensor equals roundtrip_torch")
    args = ap.parse_args()
    torch.set_num_threads(1)  # float64 reductions in a fixed order: byte-identical regeneration
    if args.check_attn:
        return check_attn(args.check_attn[0], args.check_attn[1], args.expect_golden)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}: writing goldens to {args.out}")
    verify(generate(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
