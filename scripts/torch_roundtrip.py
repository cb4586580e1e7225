#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The example models round-trip with PyTorch, in both directions.

  scripts/torch_roundtrip.py imdb --program build/examples/imdb/imdb --data examples/imdb/sample/aclImdb --work /tmp/rt
  scripts/torch_roundtrip.py clue --program build/examples/clue/clue --data tests/fixtures/clue_small --work /tmp/rt
  scripts/torch_roundtrip.py imdb --program ... --model runs/imdb/h8      # a trained run instead of a quick one
  scripts/torch_roundtrip.py imdb ... --extra "--activation silu"         # more flags for the quick run

1. attn -> PyTorch: trains a short run with the program (or takes --model), lets `predict --dump`
   write a batch of texts (their input tensors) and attn's logits, builds the same model in
   PyTorch, loads the run's model.safetensors under attn's names (strictly: every parameter, no
   other) and reproduces the logits from the dumped inputs to --tol (default 1e-4).
2. PyTorch -> attn: trains the PyTorch model a few steps away from those weights, saves them as
   model.safetensors in a copy of the run directory, and checks that `predict` on the copy gives
   PyTorch's logits (to --tol) and the same predictions.

Needs torch only (safetensors is read and written here). Without torch it prints SKIPPED and exits
77, which ctest reports as skipped.
"""
import argparse
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("SKIPPED: torch is not installed (pip install torch)")
    sys.exit(77)

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8,
          "BOOL": torch.bool, "F16": torch.float16, "BF16": torch.bfloat16}
NAMES = {v: k for k, v in DTYPES.items()}


def load_safetensors(path):
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(body[a:b]), dtype=DTYPES[e["dtype"]]) if b > a else torch.empty(0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def tensor_bytes(t):
    u8 = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8)
    try:
        return u8.numpy().tobytes()
    except (ImportError, RuntimeError):  # torch without numpy
        return bytes(u8.tolist())


def save_safetensors(tensors, path):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = tensor_bytes(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = Path(str(path) + ".tmp")
    tmp.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    tmp.replace(path)


def masked_mean(h, keep):
    k = keep.unsqueeze(-1).to(h.dtype)
    return (h * k).sum(1) / k.sum(1).clamp(min=1)


def masked_max(h, keep):
    m = h.masked_fill(~keep.unsqueeze(-1), float("-inf")).amax(1)
    return torch.where(keep.any(1, keepdim=True), m, torch.zeros_like(m))


# attn's nn::Activation names as torch's activation arguments.
TORCH_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": lambda h: F.gelu(h, approximate="tanh"), "silu": F.silu}


class Imdb(nn.Module):
    """examples/imdb/model.hpp: word + position + hashed n-gram embeddings, post-norm
    TransformerEncoder layers (the configuration's activation, GELU by default; feed-forward width
    256, optionally a sliding attention window),
    masked mean+max pooling, the NB-LR log-odds (the ensemble's input; zero otherwise), head."""

    def __init__(self, m, heads):
        super().__init__()
        d = 128
        self.window = m["window"]
        self.use_cls = m["pool"] == "cls"  # a [CLS] token at position 0, global under a window
        self.embed = nn.Embedding(m["vocab"], d, padding_idx=0)
        self.pos = nn.Embedding(m["max_len"] + self.use_cls, d)
        self.ngram = nn.Embedding(max(m["ngram_buckets"] + 1, 2), d, padding_idx=0)
        self.encoder = None
        if m["layers"]:
            layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=m["dropout"], batch_first=True,
                                               activation=TORCH_ACTIVATIONS[m.get("activation", "gelu")],
                                               norm_first=m["norm_first"])
            self.encoder = nn.TransformerEncoder(layer, m["layers"], norm=nn.LayerNorm(d) if m["norm_first"] else None,
                                                 enable_nested_tensor=False)
        if self.use_cls:
            self.cls = nn.Embedding(2, d, padding_idx=0)
        self.head = nn.Linear((1 if self.use_cls else 2) * d + 1, 2)
        self.nblr = nn.Module()  # fitted by LIBLINEAR in attn; its score comes in as the input nb
        self.nblr.weight = nn.Parameter(torch.zeros(max(m["nblr_buckets"] + 1, 2), 1), requires_grad=False)
        self.nblr.bias = nn.Parameter(torch.zeros(1, 1), requires_grad=False)

    def forward(self, b):
        keep = b["mask"] != 0
        x = self.embed(b["ids"].long()) + self.pos(b["pos"].long())
        n = 2
        while f"grams{n}" in b:  # the n-gram starting at each token, n = 2 .. ngram_order
            x = x + self.ngram(b[f"grams{n}"].long())
            n += 1
        if self.use_cls:
            x = x + self.cls(b["cls"].long())
        h = x
        if self.encoder is not None:
            t = x.shape[1]
            i = torch.arange(t)
            hidden = (i[:, None] - i[None, :]).abs() > self.window if self.window else None  # True: may not attend
            if hidden is not None and self.use_cls:
                hidden[0, :] = False  # the [CLS] token sees every token, every token sees it
                hidden[:, 0] = False
            for layer in self.encoder.layers:
                # A padded query may see no real key within its window: its row is NaN in PyTorch, and
                # a NaN value times a zero weight is NaN in the next layer. attn zeroes padded rows
                # (PaddedRows::zero); so does this loop. Real rows are unaffected.
                h = layer(h, src_mask=hidden, src_key_padding_mask=~keep).masked_fill(~keep.unsqueeze(-1), 0.0)
            if self.encoder.norm is not None:
                h = self.encoder.norm(h)
        pooled = h[:, 0] if self.use_cls else torch.cat([masked_mean(h, keep), masked_max(h, keep)], 1)
        return self.head(torch.cat([pooled, b["nb"]], 1))


class Clue(nn.Module):
    """examples/clue/model.hpp: character embeddings, BiLSTM over the real characters,
    MultiheadAttention, residual LayerNorm (unless --no-residual), masked mean pooling, head.
    With 0 heads (the ablation) the attention branch is gone: LayerNorm(h), or h, is pooled."""

    def __init__(self, m, heads):
        super().__init__()
        self.residual = m["residual"]
        self.embed = nn.Embedding(m["vocab"], 128, padding_idx=0)
        self.lstm = nn.LSTM(128, 128, batch_first=True, bidirectional=True)
        self.attn = nn.MultiheadAttention(256, heads, batch_first=True) if heads else None
        self.norm = nn.LayerNorm(256)
        self.head = nn.Linear(256, m.get("classes", 15))  # labels.json's classes (15: TNEWS)

    def forward(self, b):
        keep = b["mask"] != 0
        ids = b["ids"].long()
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(ids), keep.sum(1), batch_first=True, enforce_sorted=False)
        h, _ = nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=ids.shape[1])
        if self.attn is None:
            y = self.norm(h) if self.residual else h
        else:
            a, _ = self.attn(h, h, h, key_padding_mask=~keep, need_weights=False)
            y = self.norm(h + a) if self.residual else a
        return self.head(masked_mean(y, keep))


TEXTS = {
    "imdb": ["The movie was not good, but the acting was brilliant.",
             "A dull, predictable plot and wooden dialogue; I wanted my two hours back.",
             "One of the finest films of the decade: moving, funny and beautifully shot.",
             "Meh."],
    "clue": ["中国队在世界杯预选赛中取得两连胜", "苹果发布新款手机，售价创新高", "今年高考作文题目公布", "股市"],
}
QUICK = {  # a short training run on the bundled data when no --model is given
    "imdb": ["--limit", "160", "--epochs", "1", "--batch", "16", "--max-len", "48", "--ngram-buckets", "512",
             "--ngram-order", "3", "--layers", "2", "--window", "6", "--pool", "cls", "--nblr-buckets", "0", "--no-ablation", "--threads", "2"],
    "clue": ["--epochs", "1", "--batch", "8", "--threads", "2"],
}


def run(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(map(str, cmd))} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def attn_logits(args, model_dir, dump):
    run([args.program, "predict", "--model", model_dir, "--dump", dump] + TEXTS[args.example])
    return load_safetensors(dump)


def build(args, model_dir):
    config = json.loads((Path(model_dir) / "config.json").read_text())
    cls = Imdb if args.example == "imdb" else Clue
    model = cls(config["model"], config["heads"])
    model.eval()
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("example", choices=["imdb", "clue"])
    ap.add_argument("--program", required=True, help="the example program (build/examples/<example>/<example>)")
    ap.add_argument("--work", required=True, help="a scratch directory (replaced)")
    ap.add_argument("--data", help="data for the quick training run")
    ap.add_argument("--model", help="a trained run directory (default: train a quick one into --work)")
    ap.add_argument("--heads", type=int, default=2, help="heads of the quick run (clue: 0 is the model without attention)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--extra", default="", help="more flags for the quick training run, e.g. \"--activation silu\"")
    args = ap.parse_args()
    torch.manual_seed(0)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    model_dir = Path(args.model) if args.model else None
    if model_dir is None:
        if not args.data:
            sys.exit("FAILED: give --model, or --data for a quick training run")
        run([args.program, "--data", args.data, "--out", work / "run", "--heads", str(args.heads)] + QUICK[args.example]
            + args.extra.split())
        model_dir = work / "run" / (f"h{args.heads}" if args.heads else "ablation")

    # 1. attn -> PyTorch.
    dump = attn_logits(args, model_dir, work / "attn.safetensors")
    model = build(args, model_dir)
    weights = load_safetensors(model_dir / "model.safetensors")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        sys.exit(f"FAILED: names differ: missing in model.safetensors {missing}, not in the PyTorch model {unexpected}")
    with torch.no_grad():
        ours = model(dump)
    err = (ours - dump["logits"]).abs().max().item()
    print(f"{args.example}: attn -> PyTorch: {len(TEXTS[args.example])} texts, batch {tuple(dump['ids'].shape)}, "
          f"max |logit difference| {err:.2e} (tolerance {args.tol:g})")
    if not err <= args.tol:
        sys.exit(f"FAILED: PyTorch's logits\n{ours}\nattn's\n{dump['logits']}")

    # 2. PyTorch -> attn: a few Adam steps towards other labels, then predict with the result.
    target = (dump["logits"].argmax(1) + 1) % dump["logits"].shape[1]
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(5):
        opt.zero_grad()
        F.cross_entropy(model(dump), target).backward()
        opt.step()
    with torch.no_grad():
        trained = model(dump)
    moved = (trained - ours).abs().max().item()
    if not moved > 100 * args.tol:
        sys.exit(f"FAILED: the PyTorch training moved the logits by {moved:.2e} only; the check would not see a load that did nothing")
    copy = work / "from_torch"
    copy.mkdir()
    for f in Path(model_dir).iterdir():  # the run's configuration and vocabulary, not its weights or state
        if f.is_file() and f.suffix != ".safetensors" and f.name != "state.json" and not f.name.endswith(".tmp"):
            shutil.copy(f, copy / f.name)
    save_safetensors({k: v.float() for k, v in model.state_dict().items()}, copy / "model.safetensors")
    back = attn_logits(args, copy, work / "attn_from_torch.safetensors")
    err = (back["logits"] - trained).abs().max().item()
    same = bool((back["logits"].argmax(1) == trained.argmax(1)).all())
    print(f"{args.example}: PyTorch -> attn: logits moved {moved:.2e} by training in PyTorch; predict on its weights: "
          f"max |logit difference| {err:.2e}, predictions {'the same' if same else 'DIFFERENT'}")
    if not (err <= args.tol and same):
        sys.exit(f"FAILED: attn's logits\n{back['logits']}\nPyTorch's\n{trained}")
    print("ok")


if __name__ == "__main__":
    main()
