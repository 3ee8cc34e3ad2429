#!/usr/bin/env python3
"""Writes a random-weight Llama-architecture GGUF (F16 matrices, F32 norms) in a real shape,
with the tokenizer of a given GGUF (SmolLM2's, 49152 tokens), for speed work at sizes
Cascade has no real checkpoint of here. llama.cpp's `llama-quantize` then makes every
quantized type from it (scripts/bench_scale.sh).

Shapes:
  1b  Llama-3.2-1B: hidden 2048, 16 layers, 32/8 heads (head 64), ffn 8192, tied output
  8b  Llama-3-8B:   hidden 4096, 32 layers, 32/8 heads (head 128), ffn 14336, own output

Weights are N(0, 0.02^2) (norms 1), streamed tensor by tensor, so the 16 GB 8B file needs
little memory. Uses the `gguf` package (scripts/python_deps.sh).
Usage: make_random_gguf.py {1b|8b} TOKENIZER.gguf OUT.gguf
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

SHAPES = {
    "1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, tied=True, rope_base=500000.0),
    "8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, tied=False, rope_base=500000.0),
}


def tensor_shapes(s, vocab):
    """(name, numpy shape) in file order; numpy shape is [rows, cols] = ggml [ne1, ne0]."""
    h, f = s["hidden"], s["ffn"]
    kv = h // s["heads"] * s["kv_heads"]
    out = [("token_embd.weight", (vocab, h))]
    for i in range(s["layers"]):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (h,)), (p + "attn_q.weight", (h, h)), (p + "attn_k.weight", (kv, h)),
                (p + "attn_v.weight", (kv, h)), (p + "attn_output.weight", (h, h)), (p + "ffn_norm.weight", (h,)),
                (p + "ffn_gate.weight", (f, h)), (p + "ffn_up.weight", (f, h)), (p + "ffn_down.weight", (h, f))]
    out.append(("output_norm.weight", (h,)))
    if not s["tied"]:
        out.append(("output.weight", (vocab, h)))
    return out


def copy_tokenizer(reader, writer):
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    return len(reader.fields["tokenizer.ggml.tokens"].contents())


def main(shape, tokenizer_path, out_path):
    s = SHAPES[shape]
    reader = GGUFReader(tokenizer_path)
    w = GGUFWriter(out_path, "llama")
    vocab = copy_tokenizer(reader, w)
    head = s["hidden"] // s["heads"]
    w.add_name(f"cascade-random-llama-{shape}")
    w.add_context_length(8192)
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_dimension_count(head)
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(1)  # MOSTLY_F16
    shapes = tensor_shapes(s, vocab)
    for name, shp in shapes:
        dtype = np.float32 if len(shp) == 1 else np.float16
        w.add_tensor_info(name, shp, np.dtype(dtype), int(np.prod(shp)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(7)
    for name, shp in shapes:
        if len(shp) == 1:
            w.write_tensor_data(np.ones(shp, dtype=np.float32))
        else:
            w.write_tensor_data((rng.standard_normal(shp, dtype=np.float32) * 0.02).astype(np.float16))
    w.close()
    n_params = sum(int(np.prod(shp)) for _, shp in shapes)
    print(f"make_random_gguf: {out_path}: {shape}, {n_params / 1e9:.2f} B parameters, vocabulary {vocab}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        sys.exit(__doc__)
    main(*sys.argv[1:])
