"""Where the Python end-to-end tests find their models, and the reference ids they share.

Imported by tests/cli/cli_test.py and tests/integration/cluster_test.py. Models come
from $CASCADE_TESTDATA or ../shared/testdata, and the default model from models/.
"""
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
