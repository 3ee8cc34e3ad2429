#!/usr/bin/env python3
"""Random weight rows in every GGUF block type Cascade reads, and their values as the `gguf`
package on PyPI (llama.cpp's own gguf-py, numpy) dequantizes them: the independent
reference of tests/quant/quant_types_test.cc.

Blocks are random bytes (every bit pattern is a valid block) with the f16 scale fields set
to finite positive values of a realistic size. Writes, per type and shape, into OUT_DIR:
  <type>_<n_out>x<n_in>.q    the raw rows (n_out * n_in / block_elems blocks)
  <type>_<n_out>x<n_in>.f32  gguf's dequantization, float32 little-endian, row-major
Usage: make_goldens.py OUT_DIR
"""
import os
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

# Byte offsets of each block's f16 scale fields (ggml-common.h).
F16_FIELDS = {
    "Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0], "MXFP4": [],
}
# Byte offsets of E8M0 exponent fields, set to exponents of realistic weights (2^-18..2^2).
E8M0_FIELDS = {"MXFP4": [0]}
# (n_out, n_in): a padded row group, and one large enough to split over threads.
SHAPES = [(37, 512), (300, 1024)]


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20261203)
    for name, fields in F16_FIELDS.items():
        qtype = GGMLQuantizationType[name]
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        for n_out, n_in in SHAPES:
            n_blocks = n_out * n_in // block_elems
            raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
            for off in fields:
                scale = rng.uniform(0.5e-3, 4e-3, size=n_blocks).astype(np.float16)
                raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
            for off in E8M0_FIELDS.get(name, []):
                raw[:, off] = rng.integers(110, 131, size=n_blocks, dtype=np.uint8)
            rows = raw.reshape(n_out, -1)
            values = dequantize(rows, qtype).astype("<f4")
            assert values.shape == (n_out, n_in), values.shape
            stem = os.path.join(out_dir, f"{name.lower()}_{n_out}x{n_in}")
            rows.tofile(stem + ".q")
            values.tofile(stem + ".f32")
    print(f"make_goldens: wrote {len(F16_FIELDS) * len(SHAPES)} cases to {out_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
