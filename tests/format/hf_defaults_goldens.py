#!/usr/bin/env python3
"""Writes the defaults of transformers' own config classes, the independent reference of
model/format/hf_defaults.cc (tests/format/hf_defaults_test.cc compares the two).

Usage: hf_defaults_goldens.py OUT.json (through scripts/python_deps.sh, which installs each
pinned transformers into $CASCADE_PYTHON_CACHE/transformers-VERSION). Each version runs in a
python3 of its own with only its folder on the path; no torch is needed to import the
configuration classes. Output: {version: {model_type: {key: default}}}, a key listed only
when the class has a default for it (None written as null).
"""
import json
import os
import subprocess
import sys

VERSIONS = ["4.57.6", "5.25.0"]
CLASSES = ["LlamaConfig", "MistralConfig", "MixtralConfig", "Qwen2Config", "Qwen3Config", "Qwen2MoeConfig",
           "Qwen3MoeConfig", "GptOssConfig"]
# Every key Cascade's config.json reader takes from the class when a file omits it.
KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "intermediate_size", "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps", "hidden_act",
        "tie_word_embeddings", "attention_bias", "mlp_bias", "qkv_bias", "sliding_window", "use_sliding_window",
        "max_window_layers", "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
        "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"]

# Parameters one generation has and the other not, which Cascade reads by a rule of its own
# (model/format/hf_config.cc): GptOssConfig 4.x sets attention_bias = True in its body, 5.x
# takes it as a parameter defaulting to True.
NOT_COMPARED = {"gpt_oss": ["attention_bias"]}

DUMP = """
import inspect, json, sys, transformers
keys, out = json.loads(sys.argv[1]), {}
for name in json.loads(sys.argv[2]):
    cls = getattr(transformers, name)
    params = inspect.signature(cls.__init__).parameters
    d = {k: params[k].default for k in keys if k in params and params[k].default is not inspect.Parameter.empty}
    if "rope_theta" not in d and hasattr(cls, "default_theta"):  # 5.x: the base moved into rope_parameters.
        d["rope_theta"] = cls.default_theta
    out[cls.model_type] = d
print(json.dumps({"version": transformers.__version__, "defaults": out}))
"""


def main():
    cache = os.environ["CASCADE_PYTHON_CACHE"]
    goldens = {}
    for version in VERSIONS:
        env = {**os.environ, "PYTHONPATH": os.path.join(cache, f"transformers-{version}"),
               "TRANSFORMERS_VERBOSITY": "error"}
        p = subprocess.run([sys.executable, "-c", DUMP, json.dumps(KEYS), json.dumps(CLASSES)], env=env,
                           capture_output=True, text=True, check=True)
        got = json.loads(p.stdout.strip().splitlines()[-1])
        assert got["version"] == version, got["version"]
        for model_type, keys in NOT_COMPARED.items():
            for key in keys:
                got["defaults"].get(model_type, {}).pop(key, None)
        goldens[version] = got["defaults"]
    with open(sys.argv[1], "w") as f:
        json.dump(goldens, f, indent=1)
    print(f"wrote the defaults of {len(CLASSES)} config classes of transformers {', '.join(VERSIONS)}")


if __name__ == "__main__":
    main()
