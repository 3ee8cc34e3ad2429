#!/usr/bin/env python3
"""Writes a small random-weight gpt-oss model (model_type gpt_oss) as a Hugging Face
directory in transformers' GptOss* layout (BF16; merged experts, gate and up interleaved,
input-major), with the byte-level BPE tokenizer of a given GGUF (SmolLM2's), for the
cluster tests (tests/integration/cluster_test.py): 4 layers alternating a sliding window of
16 with full attention, 4 heads over 2 KV heads of 64, 8 experts (top 4) of 128, sinks,
Q/K/V/O, router and expert biases, YaRN (factor 4 over 256 positions, not truncated) and
the clamped SwiGLU (limit 7). Weights N(0, 1/fan_in), the embedding N(0, 1), so that the
text varies token to token.

With --gguf, writes the same architecture (other random values) as llama.cpp's converter
lays gpt-oss out (conversion/gpt_oss.py: arch `gpt-oss`, gate and up split, experts in
MXFP4 quantized by gguf-py, their biases, `attn_sinks.weight`, `post_attention_norm`), the
GGUF's tokenizer copied: the file llama.cpp itself runs in tests/integration/
llama_cpp_parity_test.py.

With --harmony, writes a gpt-oss model of the same shape that answers a harmony chat in
the harmony format, by construction: its tokenizer gains harmony's special tokens (and a
harmony chat template), every layer adds nothing to the residual stream (zero attention
output and expert down projections, with their biases), the embeddings of the tokens
below are scaled basis vectors, and the LM head maps each to its successor's logit (10,
all others 0), a bigram chain:
  assistant <|channel|> analysis <|message|> The user says hi . <|end|> <|start|> assistant
  <|channel|> final <|message|> Hello ! <|return|>
The two tokens that follow twice (<|channel|>, <|message|>) name both successors, the
second 0.5 lower: with presence_penalty 1 (which counts the sequence so far) the first is
chosen once, then the second. So greedy decoding writes reasoning "The user says hi." and
content "Hello!", whatever serves it.

Usage: make_random_gpt_oss.py TOKENIZER.gguf OUT_DIR           (through scripts/python_deps.sh)
       make_random_gpt_oss.py TOKENIZER.gguf --gguf OUT.gguf [20b-scaled]
       make_random_gpt_oss.py TOKENIZER.gguf --harmony OUT_DIR
"""
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import quantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_format_models import SafetensorsStream, to_bf16_bytes, write_tokenizer  # noqa: E402

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, EXPERTS, TOP_K, FF, WINDOW = 4, 256, 4, 2, 64, 8, 4, 128, 16
# The GGUF's shapes: the tests' tiny one (the constants above), and gpt-oss-20b scaled to fit
# as bench_moe.sh scales Qwen3-30B-A3B (scripts/bench_formats.sh): gpt-oss-20b is hidden 2880,
# 24 layers, 64/8 heads of 64, 32 experts (top 4) of 2880, window 128, YaRN 32 over 4096;
# here hidden 1024, 8 layers, 16/2 heads of 64 (its 8:1 grouping), 32 experts (top 4) of 1024
# (expert width = hidden, as there), the same window and YaRN.
GGUF_SHAPES = {
    "tiny": dict(layers=LAYERS, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, experts=EXPERTS,
                 top_k=TOP_K, ff=FF, window=WINDOW, ctx=1024, rope_factor=4.0, rope_orig=256),
    "20b-scaled": dict(layers=8, hidden=1024, heads=16, kv_heads=2, head_dim=64, experts=32, top_k=4, ff=1024,
                       window=128, ctx=131072, rope_factor=32.0, rope_orig=4096),
}


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


HARMONY_SPECIALS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"]
# A minimal harmony template: what a loader needs to recognise the format (its markers).
HARMONY_TEMPLATE = ("{% for m in messages %}<|start|>{{ m.role }}"
                    "{% if m.role == 'assistant' %}<|channel|>final{% endif %}<|message|>{{ m.content }}<|end|>"
                    "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}")
# (word, successors with their logits), as the module docstring says; a word that is no
# single token of the vocabulary goes through its BPE pieces, each followed by the next.
HARMONY_CHAIN = [("assistant", [("<|channel|>", 10.0)]),
                 ("<|channel|>", [("analysis", 10.0), ("final", 9.5)]),
                 ("analysis", [("<|message|>", 10.0)]), ("final", [("<|message|>", 10.0)]),
                 ("<|message|>", [("The", 10.0), ("Hello", 9.5)]),
                 ("The", [("\u0120user", 10.0)]), ("\u0120user", [("\u0120says", 10.0)]),
                 ("\u0120says", [("\u0120hi", 10.0)]), ("\u0120hi", [(".", 10.0)]), (".", [("<|end|>", 10.0)]),
                 ("<|end|>", [("<|start|>", 10.0)]), ("<|start|>", [("assistant", 10.0)]),
                 ("Hello", [("!", 10.0)]), ("!", [("<|return|>", 10.0)])]


def bpe_pieces(word, ids, ranks):
    """The byte-level BPE pieces of one pre-tokenized word (ASCII), by merge rank."""
    if word in ids:
        return [word]
    parts = list(word)
    while len(parts) > 1:
        rank, i = min((ranks.get(pair, 1 << 30), i) for i, pair in enumerate(zip(parts, parts[1:])))
        if rank == 1 << 30:
            break
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def token_chain(ids, ranks):
    """HARMONY_CHAIN over tokens: [(token, [(successor token, logit)])], each word's pieces
    chained, a word's successors following its last piece."""
    words = {w for w, succ in HARMONY_CHAIN} | {s for _, succ in HARMONY_CHAIN for s, _ in succ}
    pieces = {w: bpe_pieces(w, ids, ranks) for w in words}
    chain = {}
    for word, succ in HARMONY_CHAIN:
        p = pieces[word]
        for a, b in zip(p, p[1:]):
            chain[a] = [(b, 10.0)]
        chain[p[-1]] = [(pieces[s][0], logit) for s, logit in succ]
    return list(chain.items())


def add_harmony_tokens(out_dir, vocab):
    """Appends harmony's special tokens to the tokenizer written in out_dir; returns the
    chain over tokens (token_chain), {token: id} of its tokens and the new vocabulary size."""
    with open(os.path.join(out_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    ids = dict(tok["model"]["vocab"])
    for i, t in enumerate(HARMONY_SPECIALS):
        tok["added_tokens"].append({"id": vocab + i, "content": t, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
        ids[t] = vocab + i
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|return|>", "chat_template": HARMONY_TEMPLATE}, f)
    ranks = {tuple(m.split(" ")): i for i, m in enumerate(tok["model"]["merges"])}
    chain = token_chain(ids, ranks)
    tokens = {t for t, succ in chain} | {s for _, succ in chain for s, _ in succ}
    missing = [t for t in tokens if t not in ids]
    assert not missing, f"not tokens of this vocabulary: {missing}"
    return chain, {t: ids[t] for t in tokens}, vocab + len(HARMONY_SPECIALS)


def harmony_values(name, value, chain, chain_ids):
    """The value of tensor `name` in the --harmony model, from its random `value`."""
    if name.endswith(("self_attn.o_proj.weight", "self_attn.o_proj.bias", "down_proj", "down_proj_bias")):
        return np.zeros_like(value)  # Layers add nothing: the last hidden state is the embedding.
    basis = {t: k for k, t in enumerate(sorted(chain_ids))}  # Each chain token its own axis.
    if name == "model.embed_tokens.weight":
        for t, k in basis.items():
            value[chain_ids[t]] = 0.0
            value[chain_ids[t], k] = HIDDEN ** 0.5  # RMS 1: the final norm keeps it.
        return value
    if name == "model.norm.weight":
        return np.ones_like(value)
    if name == "lm_head.weight":
        value[:] = 0.0
        for t, succ in chain:
            for s, logit in succ:
                value[chain_ids[s], basis[t]] = logit / HIDDEN ** 0.5  # Exact in BF16.
        return value
    return value


def main(tokenizer_path, out_dir, harmony=False):
    os.makedirs(out_dir, exist_ok=True)
    vocab = write_tokenizer(GGUFReader(tokenizer_path), out_dir)
    if harmony:
        chain, chain_ids, vocab = add_harmony_tokens(out_dir, vocab)
    plan = tensors(vocab)
    stream = SafetensorsStream(os.path.join(out_dir, "model.safetensors"),
                               [(n, "BF16", s, 2 * int(np.prod(s))) for n, s, _, _ in plan])
    rng = np.random.default_rng(5)
    for name, shape, scale, mean in plan:
        value = mean + scale * rng.standard_normal(shape, dtype=np.float32)
        stream.write(to_bf16_bytes(harmony_values(name, value, chain, chain_ids) if harmony else value))
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


def write_gguf(tokenizer_path, out_path, shape="tiny"):
    g = GGUF_SHAPES[shape]
    reader = GGUFReader(tokenizer_path)
    w = GGUFWriter(out_path, "gpt-oss")
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            vtype = field.types[0]
            w.add_key_value(key, field.contents(), vtype,
                            sub_type=field.types[-1] if vtype == GGUFValueType.ARRAY else None)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    w.add_name("cascade-random-gpt-oss")
    w.add_context_length(g["ctx"])
    w.add_embedding_length(g["hidden"])
    w.add_block_count(g["layers"])
    w.add_feed_forward_length(g["ff"])
    w.add_head_count(g["heads"])
    w.add_head_count_kv(g["kv_heads"])
    w.add_key_length(g["head_dim"])
    w.add_value_length(g["head_dim"])
    w.add_rope_freq_base(150000.0)
    w.add_rope_scaling_type(__import__("gguf").RopeScalingType.YARN)
    w.add_rope_scaling_factor(g["rope_factor"])
    w.add_rope_scaling_orig_ctx_len(g["rope_orig"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(g["experts"])
    w.add_expert_used_count(g["top_k"])
    w.add_expert_feed_forward_length(g["ff"])
    w.add_sliding_window(g["window"])
    w.add_vocab_size(vocab)
    rng = np.random.default_rng(6)
    normal = lambda shape, scale, mean=0.0: (mean + scale * rng.standard_normal(shape)).astype(np.float32)  # noqa: E731
    q, kv = g["heads"] * g["head_dim"], g["kv_heads"] * g["head_dim"]
    w.add_tensor("token_embd.weight", normal((vocab, g["hidden"]), 1.0).astype(np.float16))
    for i in range(g["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", normal((g["hidden"],), 0.0, 1.0))
        for name, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            w.add_tensor(p + name + ".weight", normal((rows, g["hidden"]), g["hidden"] ** -0.5).astype(np.float16))
            w.add_tensor(p + name + ".bias", normal((rows,), 0.1))
        w.add_tensor(p + "attn_output.weight", normal((g["hidden"], q), q ** -0.5).astype(np.float16))
        w.add_tensor(p + "attn_output.bias", normal((g["hidden"],), 0.1))
        w.add_tensor(p + "attn_sinks.weight", normal((g["heads"],), 1.0))
        w.add_tensor(p + "post_attention_norm.weight", normal((g["hidden"],), 0.0, 1.0))
        w.add_tensor(p + "ffn_gate_inp.weight", normal((g["experts"], g["hidden"]), g["hidden"] ** -0.5))
        w.add_tensor(p + "ffn_gate_inp.bias", normal((g["experts"],), 0.3))
        for name, rows, cols in (("ffn_gate_exps", g["ff"], g["hidden"]), ("ffn_up_exps", g["ff"], g["hidden"]),
                                 ("ffn_down_exps", g["hidden"], g["ff"])):
            data = quantize(normal((g["experts"], rows, cols), cols ** -0.5), GGMLQuantizationType.MXFP4)
            w.add_tensor(p + name + ".weight", data, raw_dtype=GGMLQuantizationType.MXFP4)
            w.add_tensor(p + name + ".bias", normal((g["experts"], rows), 0.1))
    w.add_tensor("output_norm.weight", normal((g["hidden"],), 0.0, 1.0))
    # Logits of spread 4, so that greedy steps are rarely near-ties against llama.cpp.
    w.add_tensor("output.weight", normal((vocab, g["hidden"]), 4 * g["hidden"] ** -0.5).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[2] == "--gguf" and sys.argv[4:] in ([], ["20b-scaled"]):
        write_gguf(sys.argv[1], sys.argv[3], *sys.argv[4:])
    elif len(sys.argv) == 4 and sys.argv[2] == "--harmony":
        main(sys.argv[1], sys.argv[3], harmony=True)
    elif len(sys.argv) == 3:
        main(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__)
