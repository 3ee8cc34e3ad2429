#!/usr/bin/env python3
"""Writes a random-weight GGUF (F16 matrices, F32 norms and routers) in a real shape, with
the tokenizer of a given GGUF (SmolLM2's, 49152 tokens), for speed work at sizes Cascade
has no real checkpoint of here. llama.cpp's `llama-quantize` then makes every quantized
type from it (scripts/bench_scale.sh, scripts/bench_moe.sh).

Shapes:
  1b        Llama-3.2-1B: hidden 2048, 16 layers, 32/8 heads (head 64), ffn 8192, tied output
  8b        Llama-3-8B:   hidden 4096, 32 layers, 32/8 heads (head 128), ffn 14336, own output
  moe       Qwen3-30B-A3B scaled to fit (qwen3moe): hidden 1024, 8 layers, 16/4 heads (head
            64, q/k norms), 64 experts, top-8, expert FFN 512, every layer MoE, own output;
            embedding N(0, 1), so that each token's own features dominate its hidden state and
            the router spreads tokens over the experts as a trained one does (with 0.02, the
            deeper layers send every token to the same 8 experts)
  moe-wide  the moe shape with 32/8 heads (head 32), 2 layers and expert FFN 128: attention that
            splits 32 ways, so the all-reduce form of expert parallelism runs at EP 32
            (scripts/bench_moe_hosts.py)
  moe-tiny  the same architecture for cluster tests: hidden 256, 4 layers, 4/2 heads, 8
            experts, top-2, expert FFN 128; weights N(0, 1/fan_in), so text varies
Options: --hot-expert N makes every token choose expert N (the embedding's column 0 is 10
and expert N's router row is 20 there): a router biased to one expert. --skewed-router
skews every MoE layer's router as trained ones are (hot experts, a long tail): 8 experts
per layer, drawn apart for each layer, get a Zipf-like bias (their router rows are
0.25 / rank at the embedding's column 0, which is 10: about 2.4, 1.2, 0.8, ... over logits
of order 1). --chat-template FILE puts FILE's Jinja template in place of the tokenizer's.

Weights are N(0, 0.02^2) (norms 1), streamed tensor by tensor, so the 16 GB 8B file needs
little memory. Uses the `gguf` package (scripts/python_deps.sh).
Usage: make_random_gguf.py {1b|8b|moe|moe-wide|moe-tiny} TOKENIZER.gguf OUT.gguf [--hot-expert N] [--skewed-router]
       [--chat-template FILE]
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

SHAPES = {
    "1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, tied=True, rope_base=500000.0),
    "8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, tied=False, rope_base=500000.0),
    "moe": dict(hidden=1024, layers=8, heads=16, kv_heads=4, ffn=3072, tied=False, rope_base=1000000.0, experts=64,
                experts_used=8, expert_ffn=512, embd_std=1.0),
    "moe-wide": dict(hidden=1024, layers=2, heads=32, kv_heads=8, ffn=3072, tied=False, rope_base=1000000.0, experts=64,
                     experts_used=8, expert_ffn=128, embd_std=1.0),
    "moe-tiny": dict(hidden=256, layers=4, heads=4, kv_heads=2, ffn=512, tied=False, rope_base=1000000.0, experts=8,
                     experts_used=2, expert_ffn=128, fan_in=True),
}


def tensor_shapes(s, vocab):
    """(name, numpy shape) in file order; numpy shape is [rows, cols] = ggml [ne1, ne0]."""
    h, f = s["hidden"], s["ffn"]
    kv = h // s["heads"] * s["kv_heads"]
    out = [("token_embd.weight", (vocab, h))]
    for i in range(s["layers"]):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (h,)), (p + "attn_q.weight", (h, h)), (p + "attn_k.weight", (kv, h)),
                (p + "attn_v.weight", (kv, h)), (p + "attn_output.weight", (h, h)), (p + "ffn_norm.weight", (h,))]
        if "experts" in s:  # qwen3moe: per-head q/k norms, the router and merged expert tensors.
            d, e, fe = h // s["heads"], s["experts"], s["expert_ffn"]
            out += [(p + "attn_q_norm.weight", (d,)), (p + "attn_k_norm.weight", (d,)),
                    (p + "ffn_gate_inp.weight", (e, h)), (p + "ffn_gate_exps.weight", (e, fe, h)),
                    (p + "ffn_up_exps.weight", (e, fe, h)), (p + "ffn_down_exps.weight", (e, h, fe))]
        else:
            out += [(p + "ffn_gate.weight", (f, h)), (p + "ffn_up.weight", (f, h)), (p + "ffn_down.weight", (h, f))]
    out.append(("output_norm.weight", (h,)))
    if not s["tied"]:
        out.append(("output.weight", (vocab, h)))
    return out


def copy_tokenizer(reader, writer, chat_template=None):
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.") or (chat_template is not None and key == "tokenizer.chat_template"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    return len(reader.fields["tokenizer.ggml.tokens"].contents())


def is_f32(name, shp):
    """Norms, and routers (llama-quantize keeps ffn_gate_inp unquantized)."""
    return len(shp) == 1 or "ffn_gate_inp" in name


def main(shape, tokenizer_path, out_path, hot_expert=-1, chat_template=None, skewed=False):
    s = SHAPES[shape]
    reader = GGUFReader(tokenizer_path)
    arch = "qwen3moe" if "experts" in s else "llama"
    w = GGUFWriter(out_path, arch)
    vocab = copy_tokenizer(reader, w, chat_template)
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
    if "experts" in s:
        w.add_key_length(head)
        w.add_value_length(head)
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["experts_used"])
        w.add_expert_feed_forward_length(s["expert_ffn"])
    w.add_file_type(1)  # MOSTLY_F16
    shapes = tensor_shapes(s, vocab)
    for name, shp in shapes:
        dtype = np.float32 if is_f32(name, shp) else np.float16
        w.add_tensor_info(name, shp, np.dtype(dtype), int(np.prod(shp)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(7)
    for name, shp in shapes:
        if len(shp) == 1:
            w.write_tensor_data(np.ones(shp, dtype=np.float32))
            continue
        x = rng.standard_normal(shp, dtype=np.float32) * 0.02
        if name == "token_embd.weight" and "embd_std" in s:
            x *= s["embd_std"] / 0.02
        if s.get("fan_in"):  # N(0, 1/fan_in) (embedding N(0, 1)): outputs that vary token to token.
            x *= 1 / (0.02 * np.sqrt(1 if name == "token_embd.weight" else shp[-1]))
        if "ffn_gate_inp" in name:
            x *= 1 / (0.02 * np.sqrt(shp[1]))  # Router logits of order 1 over the normed hidden state.
            if hot_expert >= 0:
                x[hot_expert, 0] = 20.0
            if skewed:
                layer = int(name.split(".")[1])
                hot = np.random.default_rng(11 + layer).choice(shp[0], 8, replace=False)
                for rank, e in enumerate(hot):
                    x[e, 0] = 0.25 / (rank + 1)
        if name == "token_embd.weight" and (hot_expert >= 0 or skewed):
            x[:, 0] = 10.0
        w.write_tensor_data(x if is_f32(name, shp) else x.astype(np.float16))
    w.close()
    n_params = sum(int(np.prod(shp)) for _, shp in shapes)
    print(f"make_random_gguf: {out_path}: {shape}, {n_params / 1e9:.2f} B parameters, vocabulary {vocab}")


if __name__ == "__main__":
    args = sys.argv[1:]
    hot, template, skewed = -1, None, False
    while len(args) >= 4 and args[3] in ("--hot-expert", "--chat-template", "--skewed-router"):
        if args[3] == "--skewed-router":
            skewed = True
            args = args[:3] + args[4:]
            continue
        if len(args) < 5:
            sys.exit(__doc__)
        if args[3] == "--hot-expert":
            hot = int(args[4])
        else:
            template = open(args[4]).read()
        args = args[:3] + args[5:]
    if len(args) != 3 or args[0] not in SHAPES:
        sys.exit(__doc__)
    main(*args, hot_expert=hot, chat_template=template, skewed=skewed)
