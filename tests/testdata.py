"""Where the Python end-to-end tests find their models, and the reference ids they share.

Imported by tests/cli/cli_test.py and tests/integration/cluster_test.py. Models come
from $CASCADE_TESTDATA or ../shared/testdata, and the default model from models/.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.environ.get("CASCADE_TESTDATA") or os.path.join(ROOT, "..", "shared", "testdata")
STORIES = os.path.join(TESTDATA, "models", "stories260K.gguf")
TINY_HF = os.path.join(TESTDATA, "models", "tinystories-656k")
TINY_GGUF = os.path.join(TESTDATA, "models", "tinystories-656k-q8_0.gguf")
SMOL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
# Greedy ids from BOS for stories260K (../shared/testdata/README.md, a float64 reference).
STORIES_IDS = [403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337]


def need(*paths):
    """Ends the test as skipped (ctest matches "SKIP:") when a file is missing."""
    for p in paths:
        if not os.path.exists(p):
            print(f"SKIP: {p} not available (set CASCADE_TESTDATA or run scripts/setup.sh)")
            sys.exit(0)


def hf_copy(src, dst, edit):
    """A copy of the Hugging Face directory `src` at `dst`: its files linked, config.json
    rewritten by `edit(config)`. Returns `dst`."""
    os.makedirs(dst)
    for name in os.listdir(src):
        if name != "config.json":
            os.symlink(os.path.join(src, name), os.path.join(dst, name))
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    edit(config)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return dst


def as_transformers5(config):
    """A 4.x config.json rewritten the way transformers 5 saves it: the base and the scaling
    in rope_parameters, dtype for torch_dtype."""
    params = dict(config.pop("rope_scaling", None) or {"rope_type": "default"})
    params["rope_theta"] = config.pop("rope_theta")
    config["rope_parameters"] = params
    if "torch_dtype" in config:
        config["dtype"] = config.pop("torch_dtype")
    config["transformers_version"] = "5.25.0"
