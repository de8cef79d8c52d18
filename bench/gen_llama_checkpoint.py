#!/usr/bin/env python3
"""Writes a Llama-3.1-8B-shaped safetensors checkpoint with deterministic bf16 values.

4 shards, 291 tensors, 16.06 GB, the tensor names and shapes of meta-llama/Llama-3.1-8B, split in
order (embed, layers 0..31, norm, lm_head) into shards of at most 5 GB as Hugging Face does, with the
model's config.json, so transformers' LlamaForCausalLM runs it (python/refengine). Values come from one
seeded 64 MiB block of bf16 numbers (normal, std 0.02), each tensor starting at a different offset in
it, so tensors differ and the files are the same on every run; generation is bound by the disk, not by
the random generator. Needs numpy only.

    gen_llama_checkpoint.py OUT_DIR [--shape 8b|tiny] [--scale 1.0]
      --shape tiny: a consistent 2-layer Llama of about 75 MB (refengine smoke tests)
      --scale < 1:  shrinks every row count of the 8b shape (weight-store tests only: the shapes no longer
                    make a model, so no config.json is written)
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

# hidden, intermediate, vocab, layers, attention heads, key/value heads (Llama-3.1-8B and a tiny one)
SHAPES = {
    "8b": dict(hidden=4096, inter=14336, vocab=128256, layers=32, heads=32, kv_heads=8),
    "tiny": dict(hidden=512, inter=1024, vocab=32000, layers=2, heads=8, kv_heads=2),
}
BLOCK = 64 << 20
SHARD_LIMIT = 5_000_000_000


def tensors(d, scale):
    HIDDEN, INTER, VOCAB, LAYERS = d["hidden"], d["inter"], d["vocab"], d["layers"]
    KV = d["kv_heads"] * (d["hidden"] // d["heads"])

    def rows(n):
        return max(1, int(n * scale))

    out = [("model.embed_tokens.weight", [rows(VOCAB), HIDDEN])]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", [HIDDEN]),
            (p + "mlp.down_proj.weight", [rows(HIDDEN), INTER]),
            (p + "mlp.gate_proj.weight", [rows(INTER), HIDDEN]),
            (p + "mlp.up_proj.weight", [rows(INTER), HIDDEN]),
            (p + "post_attention_layernorm.weight", [HIDDEN]),
            (p + "self_attn.k_proj.weight", [rows(KV), HIDDEN]),
            (p + "self_attn.o_proj.weight", [rows(HIDDEN), HIDDEN]),
            (p + "self_attn.q_proj.weight", [rows(HIDDEN), HIDDEN]),
            (p + "self_attn.v_proj.weight", [rows(KV), HIDDEN]),
        ]
    out += [("model.norm.weight", [HIDDEN]), ("lm_head.weight", [rows(VOCAB), HIDDEN])]
    return out


def nbytes(shape):
    n = 2
    for d in shape:
        n *= d
    return n


def block():
    rng = np.random.default_rng(20250101)
    f32 = (rng.standard_normal(BLOCK // 2, dtype=np.float32) * 0.02).astype(np.float32)
    # bf16 = the high half of the float32 bit pattern (truncation is fine for synthetic weights).
    return (f32.view(np.uint32) >> 16).astype(np.uint16).tobytes()


def hf_config(d):
    """The config.json of meta-llama/Llama-3.1-8B with this shape's sizes (rope scaling included)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
        "hidden_size": d["hidden"], "intermediate_size": d["inter"], "vocab_size": d["vocab"],
        "num_hidden_layers": d["layers"], "num_attention_heads": d["heads"],
        "num_key_value_heads": d["kv_heads"], "head_dim": d["hidden"] // d["heads"],
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192,
                                                 "rope_type": "llama3"},
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "bos_token_id": min(128000, d["vocab"] - 2), "eos_token_id": min(128001, d["vocab"] - 1),
    }


def write_tensor(f, data, start, n):
    mv = memoryview(data)
    pos = start
    while n > 0:
        k = min(n, BLOCK - pos)
        f.write(mv[pos:pos + k])
        n -= k
        pos = 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    if not 0 < a.scale <= 1:
        ap.error("--scale must be in (0, 1]")
    os.makedirs(a.out_dir, exist_ok=True)
    dims = SHAPES[a.shape]
    ts = tensors(dims, a.scale)
    shards, cur, size = [], [], 0
    for name, shape in ts:
        if cur and size + nbytes(shape) > SHARD_LIMIT:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, shape))
        size += nbytes(shape)
    shards.append(cur)
    data = block()
    index, total, idx = {}, 0, 0
    for s, members in enumerate(shards):
        fname = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, shape in members:
            header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + nbytes(shape)]}
            off += nbytes(shape)
        hj = json.dumps(header, separators=(",", ":")).encode()
        hj += b" " * (-len(hj) % 8)
        with open(os.path.join(a.out_dir, fname), "wb") as f:
            f.write(struct.pack("<Q", len(hj)))
            f.write(hj)
            for name, shape in members:
                write_tensor(f, data, (idx * 7919 * 2) % BLOCK, nbytes(shape))
                index[name] = fname
                idx += 1
        total += off
    with open(os.path.join(a.out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": index}, f, indent=1)
    if a.scale == 1.0:
        with open(os.path.join(a.out_dir, "config.json"), "w") as f:
            json.dump(hf_config(dims), f, indent=1)
    print(json.dumps({"shards": len(shards), "tensors": len(ts), "bytes": total}))


if __name__ == "__main__":
    sys.exit(main())
