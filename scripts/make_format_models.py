#!/usr/bin/env python3
"""Rewrites a random-weight `llama` or `qwen3moe` GGUF with F16 matrices
(scripts/make_random_gguf.py) in the low-precision forms the reference models ship in and
llama-quantize cannot make, for scripts/bench_formats.sh:

  fp8-hf DIR      a Hugging Face directory as DeepSeek-V3 and Qwen3-FP8 ship: every
                  projection in F8_E4M3 with `weight_scale_inv` (F32) per 128 x 128 block
                  (quantization_config quant_method fp8, weight_block_size [128, 128]); the
                  embedding, norms and head BF16 / F32 as those checkpoints keep them; Q/K rows
                  back in Hugging Face order (llama.cpp's converter permutes them); config.json
                  and a byte-level BPE tokenizer.json from the GGUF's own vocabulary and merges.
                  A qwen3moe GGUF becomes Qwen3-30B-A3B-FP8's layout: one FP8 tensor per
                  expert and projection, the router (`mlp.gate`) BF16, Q/K norms F32.
  mxfp4 OUT.gguf  the same GGUF with every projection in GGML's MXFP4 (E2M1 codes, an E8M0
                  scale per 32: gpt-oss's format), quantized by gguf-py's own reference
                  (gguf.quants), and the embedding in Q8_0.

E4M3 rounding is core/fp8.h's: round to nearest even, saturating at 448. Tensors are
streamed one at a time, so the 1B model needs little memory.
Usage: make_format_models.py F16.gguf {fp8-hf DIR | mxfp4 OUT.gguf}
"""
import json
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import quantize

PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
HF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def field(reader, key):
    f = reader.fields[key]
    return f.contents()


def matrix(t):
    """A GGUF tensor as a numpy [rows, cols] (ggml [ne1, ne0]) array of float32."""
    return np.asarray(t.data, dtype=np.float32).reshape(int(t.shape[1]), int(t.shape[0]))


def e4m3_codes(x):
    """float32 array, |x| <= 448 after scaling -> uint8 E4M3 codes (core/fp8.h's rounding)."""
    a = np.abs(x).astype(np.float32)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    sub = np.rint(a * 512.0).astype(np.int32)  # Multiples of 2^-9 (8 is the first normal).
    m, e = np.frexp(a)  # a = m * 2^e, m in [0.5, 1).
    mant = np.rint((2.0 * m - 1.0) * 8.0).astype(np.int32)
    biased = e.astype(np.int32) - 1 + 7
    carry = mant == 8
    mant = np.where(carry, 0, mant)
    biased = np.where(carry, biased + 1, biased)
    normal = np.minimum((biased << 3) | mant, 0x7E)
    code = np.where(a < 2.0 ** -6, sub, np.where(a >= 448.0, 0x7E, normal))
    return (code.astype(np.uint8) | sign)


def fp8_blocks(w):
    """[rows, cols] -> (E4M3 codes, F32 scales [ceil(rows/128), ceil(cols/128)])."""
    rows, cols = w.shape
    gr, gc = (rows + 127) // 128, (cols + 127) // 128
    scales = np.zeros((gr, gc), dtype=np.float32)
    codes = np.zeros((rows, cols), dtype=np.uint8)
    for i in range(gr):
        for j in range(gc):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            amax = float(np.abs(blk).max())
            d = np.float32(amax / 448.0) if amax > 0 else np.float32(1.0)
            scales[i, j] = d
            codes[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = e4m3_codes(blk / d)
    return codes, scales


def unpermute(w, n_head):
    """Undoes llama.cpp's Q/K row permutation (convert_hf_to_gguf.py LlamaModel.permute)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)


def to_bf16_bytes(x):
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()


class SafetensorsStream:
    """Writes a safetensors file whose header lists every tensor up front; data streamed."""

    def __init__(self, path, entries):  # entries: [(name, dtype, shape, nbytes)]
        header, off = {}, 0
        for name, dtype, shape, nbytes in entries:
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + nbytes]}
            off += nbytes
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        self.f = open(path, "wb")
        self.f.write(struct.pack("<Q", len(text)))
        self.f.write(text)

    def write(self, data):
        self.f.write(data)

    def close(self):
        self.f.close()


def hf_config(reader, vocab, tied):
    arch = str(field(reader, "general.architecture"))
    g = lambda k: field(reader, f"{arch}.{k}")  # noqa: E731
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": int(g("embedding_length")),
        "intermediate_size": int(g("feed_forward_length")), "num_hidden_layers": int(g("block_count")),
        "num_attention_heads": int(g("attention.head_count")), "num_key_value_heads": int(g("attention.head_count_kv")),
        "rms_norm_eps": float(g("attention.layer_norm_rms_epsilon")), "rope_theta": float(g("rope.freq_base")),
        "max_position_embeddings": int(g("context_length")), "vocab_size": vocab, "tie_word_embeddings": tied,
        "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0,
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                "weight_block_size": [128, 128]},
    }
    if arch == "qwen3moe":  # Qwen3-30B-A3B-FP8's config: every layer sparse, top-k renormalised.
        config.update({
            "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "head_dim": int(g("attention.key_length")),
            "num_experts": int(g("expert_count")), "num_experts_per_tok": int(g("expert_used_count")),
            "moe_intermediate_size": int(g("expert_feed_forward_length")), "norm_topk_prob": True,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False, "use_sliding_window": False,
            "sliding_window": None})
    return config


def write_tokenizer(reader, out_dir):
    tokens = [str(t) for t in field(reader, "tokenizer.ggml.tokens")]
    merges = [str(m) for m in field(reader, "tokenizer.ggml.merges")]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": byte_level,
           "post_processor": None, "decoder": byte_level,
           "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": tokens[0]}, f)
    return len(tokens)


def fp8_hf(src, out_dir):
    reader = GGUFReader(src)
    os.makedirs(out_dir, exist_ok=True)
    vocab = write_tokenizer(reader, out_dir)
    tensors = {t.name: t for t in reader.tensors}
    tied = "output.weight" not in tensors
    config = hf_config(reader, vocab, tied)
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    moe = config["model_type"] == "qwen3_moe"
    # (hf name, gguf tensor, kind, expert): kind fp8 | bf16 | f32; expert: the slice of a
    # merged [experts, rows, cols] GGUF tensor that is one Hugging Face tensor, or None.
    plan = [("model.embed_tokens.weight", "token_embd.weight", "bf16", None)]
    for i in range(config["num_hidden_layers"]):
        layer, blk = f"model.layers.{i}.", f"blk.{i}."
        for part in ("attn_norm", "ffn_norm"):
            plan.append((f"{layer}{HF_NAMES[part]}.weight", f"{blk}{part}.weight", "f32", None))
        for part in PROJECTIONS[:4] if moe else PROJECTIONS:
            plan.append((f"{layer}{HF_NAMES[part]}.weight", f"{blk}{part}.weight", "fp8", None))
        if moe:  # Q/K norms and the router as Qwen3-FP8 keeps them (F32 / BF16), experts FP8.
            plan.append((f"{layer}self_attn.q_norm.weight", f"{blk}attn_q_norm.weight", "f32", None))
            plan.append((f"{layer}self_attn.k_norm.weight", f"{blk}attn_k_norm.weight", "f32", None))
            plan.append((f"{layer}mlp.gate.weight", f"{blk}ffn_gate_inp.weight", "bf16", None))
            for e in range(config["num_experts"]):
                for part, hf in (("ffn_gate_exps", "gate_proj"), ("ffn_up_exps", "up_proj"), ("ffn_down_exps", "down_proj")):
                    plan.append((f"{layer}mlp.experts.{e}.{hf}.weight", f"{blk}{part}.weight", "fp8", e))
    plan.append(("model.norm.weight", "output_norm.weight", "f32", None))
    if not tied:
        plan.append(("lm_head.weight", "output.weight", "bf16", None))
    entries = []
    for hf, name, kind, expert in plan:
        t = tensors[name]
        shape = [int(d) for d in reversed(t.shape)] if len(t.shape) > 1 else [int(t.shape[0])]
        if expert is not None:
            shape = shape[1:]
        n = int(np.prod(shape))
        if kind == "fp8":
            entries.append((hf, "F8_E4M3", shape, n))
            entries.append((hf + "_scale_inv", "F32", [(shape[0] + 127) // 128, (shape[1] + 127) // 128],
                            4 * ((shape[0] + 127) // 128) * ((shape[1] + 127) // 128)))
        else:
            entries.append((hf, kind.upper(), shape, n * (2 if kind == "bf16" else 4)))
    out = SafetensorsStream(os.path.join(out_dir, "model.safetensors"), entries)
    merged = {}  # The current merged expert tensor, read once for all its experts.
    for hf, name, kind, expert in plan:
        t = tensors[name]
        if kind == "f32":
            out.write(np.asarray(t.data, dtype=np.float32).tobytes())
            continue
        if expert is not None:
            if name not in merged:
                e, rows, cols = (int(d) for d in reversed(t.shape))
                merged = {name: np.asarray(t.data, dtype=np.float32).reshape(e, rows, cols)}
            w = merged[name][expert]
        else:
            w = matrix(t)
        # llama.cpp's converter permutes Llama's Q/K rows, not Qwen3's (NeoX rotation).
        if name.endswith("attn_q.weight") and not moe:
            w = unpermute(w, n_head)
        elif name.endswith("attn_k.weight") and not moe:
            w = unpermute(w, n_kv)
        if kind == "bf16":
            out.write(to_bf16_bytes(w))
        else:
            codes, scales = fp8_blocks(w)
            out.write(codes.tobytes())
            out.write(scales.tobytes())
    out.close()
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def mxfp4_gguf(src, out_path):
    reader = GGUFReader(src)
    arch = str(field(reader, "general.architecture"))
    w = GGUFWriter(out_path, arch)
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub_type=sub)
    w.add_file_type(38)  # LLAMA_FTYPE_MOSTLY_MXFP4_MOE: the closest file type llama.cpp names.

    def qtype(name):
        if name.split(".")[-2] in PROJECTIONS:
            return GGMLQuantizationType.MXFP4
        return GGMLQuantizationType.Q8_0 if name in ("token_embd.weight", "output.weight") else None

    for t in reader.tensors:
        q = qtype(t.name)
        shape = [int(d) for d in reversed(t.shape)] if len(t.shape) > 1 else [int(t.shape[0])]
        if q is None:
            data = np.asarray(t.data, dtype=np.float32).reshape(shape)
            w.add_tensor_info(t.name, shape, data.dtype, data.nbytes)
        else:
            from gguf.constants import GGML_QUANT_SIZES
            bs, ts = GGML_QUANT_SIZES[q]
            byte_shape = [shape[0], shape[1] // bs * ts]  # What gguf-py takes for a quantized tensor.
            w.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), byte_shape[0] * byte_shape[1], raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in reader.tensors:
        q = qtype(t.name)
        if q is None:
            w.write_tensor_data(np.asarray(t.data, dtype=np.float32))
            continue
        m = matrix(t)
        parts = [quantize(m[r:r + 256], q) for r in range(0, m.shape[0], 256)]  # Bounded memory.
        w.write_tensor_data(np.concatenate(parts, axis=0))
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[2] not in ("fp8-hf", "mxfp4"):
        sys.exit(__doc__)
    (fp8_hf if sys.argv[2] == "fp8-hf" else mxfp4_gguf)(sys.argv[1], sys.argv[3])
