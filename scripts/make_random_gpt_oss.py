#!/usr/bin/env python3
"""Writes a small random-weight gpt-oss model (model_type gpt_oss) as a Hugging Face
directory in transformers' GptOss* layout (BF16; merged experts, gate and up interleaved,
input-major), with the byte-level BPE tokenizer of a given GGUF (SmolLM2's), for the
cluster tests (tests/integration/cluster_test.py): 4 layers alternating a sliding window of
16 with full attention, 4 heads over 2 KV heads of 64, 8 experts (top 4) of 128, sinks,
Q/K/V/O, router and expert biases, YaRN (factor 4 over 256 positions, not truncated) and
the clamped SwiGLU (limit 7). Weights N(0, 1/fan_in), the embedding N(0, 1), so that the
text varies token to token.

Usage: make_random_gpt_oss.py TOKENIZER.gguf OUT_DIR   (through scripts/python_deps.sh)
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_format_models import SafetensorsStream, to_bf16_bytes, write_tokenizer  # noqa: E402

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, EXPERTS, TOP_K, FF, WINDOW = 4, 256, 4, 2, 64, 8, 4, 128, 16


def tensors(vocab):
    """(name, shape, scale, mean) in file order."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    out = [("model.embed_tokens.weight", (vocab, HIDDEN), 1.0, 0.0)]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (HIDDEN,), 0.0, 1.0),
                (p + "self_attn.q_proj.weight", (q, HIDDEN), HIDDEN ** -0.5, 0.0), (p + "self_attn.q_proj.bias", (q,), 0.1, 0.0),
                (p + "self_attn.k_proj.weight", (kv, HIDDEN), HIDDEN ** -0.5, 0.0), (p + "self_attn.k_proj.bias", (kv,), 0.1, 0.0),
                (p + "self_attn.v_proj.weight", (kv, HIDDEN), HIDDEN ** -0.5, 0.0), (p + "self_attn.v_proj.bias", (kv,), 0.1, 0.0),
                (p + "self_attn.o_proj.weight", (HIDDEN, q), q ** -0.5, 0.0), (p + "self_attn.o_proj.bias", (HIDDEN,), 0.1, 0.0),
                (p + "self_attn.sinks", (HEADS,), 1.0, 0.0),
                (p + "post_attention_layernorm.weight", (HIDDEN,), 0.0, 1.0),
                (p + "mlp.router.weight", (EXPERTS, HIDDEN), HIDDEN ** -0.5, 0.0), (p + "mlp.router.bias", (EXPERTS,), 0.3, 0.0),
                (p + "mlp.experts.gate_up_proj", (EXPERTS, HIDDEN, 2 * FF), HIDDEN ** -0.5, 0.0),
                (p + "mlp.experts.gate_up_proj_bias", (EXPERTS, 2 * FF), 0.1, 0.0),
                (p + "mlp.experts.down_proj", (EXPERTS, FF, HIDDEN), FF ** -0.5, 0.0),
                (p + "mlp.experts.down_proj_bias", (EXPERTS, HIDDEN), 0.1, 0.0)]
    out += [("model.norm.weight", (HIDDEN,), 0.0, 1.0), ("lm_head.weight", (vocab, HIDDEN), HIDDEN ** -0.5, 0.0)]
    return out


def main(tokenizer_path, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    vocab = write_tokenizer(GGUFReader(tokenizer_path), out_dir)
    plan = tensors(vocab)
    stream = SafetensorsStream(os.path.join(out_dir, "model.safetensors"),
                               [(n, "BF16", s, 2 * int(np.prod(s))) for n, s, _, _ in plan])
    rng = np.random.default_rng(5)
    for _, shape, scale, mean in plan:
        stream.write(to_bf16_bytes(mean + scale * rng.standard_normal(shape, dtype=np.float32)))
    stream.close()
    config = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": HIDDEN,
              "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "head_dim": HEAD_DIM, "intermediate_size": FF, "num_local_experts": EXPERTS,
              "num_experts_per_tok": TOP_K, "vocab_size": vocab, "max_position_embeddings": 1024,
              "rms_norm_eps": 1e-5, "rope_theta": 150000.0,
              "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                               "original_max_position_embeddings": 256, "truncate": False},
              "sliding_window": WINDOW,
              "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(LAYERS)],
              "swiglu_limit": 7.0, "hidden_act": "silu", "attention_bias": True, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "eos_token_id": 0, "bos_token_id": 0}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
