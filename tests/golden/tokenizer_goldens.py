#!/usr/bin/env python3
"""Independent reference ids for tests/model/tokenizer_conformance_test.cc.

Reads the vocabularies out of the GGUF test models with the `gguf` package and runs the
reference tokenizers on them, so no expected id comes from Cascade's own code:

* SentencePiece-BPE GGUFs (stories260K): a SentencePiece ModelProto (model_type BPE,
  byte_fallback, add_dummy_prefix) is built from tokens/scores/types and run by the
  `sentencepiece` library.
* Byte-level BPE GGUFs (SmolLM2): a Hugging Face tokenizer.json (BPE + Digits/ByteLevel
  pre-tokenizer for "smollm") is built from tokens/merges and run by `tokenizers`.
* TinyStories-656K: its own tokenizer.json, run by `tokenizers`.
* o200k's pre-tokenizer (GPT-4o, gpt-oss): SmolLM2's vocab/merges behind the `Split`
  regex of gpt-oss's tokenizer.json (tiktoken's o200k_base pattern), run by `tokenizers`.
  o200k's own 200k vocabulary cannot be fetched here; the split is what this checks.

Usage (in a throwaway venv):  pip install gguf tokenizers sentencepiece protobuf
  python3 tests/golden/tokenizer_goldens.py [TESTDATA_DIR] [SMOLLM2_GGUF] [--only NAME]
(with --only smollm2-o200k, sentencepiece is not needed: the `tokenizers` in
scripts/python_deps.sh's transformers-5.25.0 folder runs it). Prints one C++ initializer
line per string; paste them into the test.
"""
import json
import sys

import gguf
from tokenizers import Tokenizer

# gpt-oss's tokenizer.json `Split` regex: tiktoken's o200k_base pattern.
O200K = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
         "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
         "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# Strings where o200k splits differently from the others: case changes inside words,
# contractions in either case, long numbers, slashes after punctuation, space runs.
O200K_STRINGS = [
    "HelloWorld iPhone XMLHttpRequest McDonald's",
    "THEY'RE here, don't WE'LL I'm",
    "1234567 and 12 apples/oranges",
    "path/to/file.txt://x\n\n  two spaces   three\tTab",
    "  leading\r\n\r\nCRLF lines",
    "Ünïcödé ÀÉÎ naïve 😀 日本語 ½",
]

STRINGS = [
    "Once upon a time, there was a little girl named Lily.",
    "Hello world",
    " leading space and  two  spaces",
    "Tim had 123 apples and 4567 pears.",
    "Ünïcödé ½ months 😀 日本語",
    "tabs\tand\nnew lines\n\n",
]


def field_strings(r, key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_values(r, key):
    f = r.fields[key]
    return [f.parts[i].tolist()[0] for i in f.data]


def field_scalar(r, key, default=None):
    if key not in r.fields:
        return default
    return r.fields[key].parts[-1].tolist()[0]


def spm_from_gguf(path):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as sp_pb2
    r = gguf.GGUFReader(path)
    m = sp_pb2.ModelProto()
    m.trainer_spec.model_type = sp_pb2.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    types = {1: sp_pb2.ModelProto.SentencePiece.NORMAL, 2: sp_pb2.ModelProto.SentencePiece.UNKNOWN,
             3: sp_pb2.ModelProto.SentencePiece.CONTROL, 4: sp_pb2.ModelProto.SentencePiece.USER_DEFINED,
             5: sp_pb2.ModelProto.SentencePiece.UNUSED, 6: sp_pb2.ModelProto.SentencePiece.BYTE}
    for tok, score, typ in zip(field_strings(r, "tokenizer.ggml.tokens"),
                               field_values(r, "tokenizer.ggml.scores"),
                               field_values(r, "tokenizer.ggml.token_type")):
        p = m.pieces.add()
        p.piece, p.score, p.type = tok, score, types[typ]
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    return lambda s: sp.encode(s)


def bpe_from_gguf(path, split=None):
    """SmolLM2's tokenizer from its GGUF; with `split`, behind that Split regex instead of
    its own Digits + ByteLevel pre-tokenizer (as gpt-oss's tokenizer.json lays it out)."""
    r = gguf.GGUFReader(path)
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    types = field_values(r, "tokenizer.ggml.token_type")
    merges = field_strings(r, "tokenizer.ggml.merges")
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == "smollm", pre
    pre_tokenizer = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    if split is not None:
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    tj = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3],
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    tok = Tokenizer.from_str(json.dumps(tj))
    return lambda s: tok.encode(s, add_special_tokens=False).ids


def main():
    args = [a for a in sys.argv[1:] if a != "--only"]
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    if only:
        args.remove(only)
    testdata = args[0] if len(args) > 0 else "../shared/testdata"
    smollm = args[1] if len(args) > 1 else "models/SmolLM2-135M-Instruct.Q4_1.gguf"
    makers = {
        "stories260K": lambda: spm_from_gguf(testdata + "/models/stories260K.gguf"),
        "tinystories-656k": lambda: (lambda t: lambda s: t.encode(s, add_special_tokens=False).ids)(
            Tokenizer.from_file(testdata + "/models/tinystories-656k/tokenizer.json")),
        "smollm2": lambda: bpe_from_gguf(smollm),
        "smollm2-o200k": lambda: bpe_from_gguf(smollm, split=O200K),
    }
    extra = {"smollm2": ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n"], "smollm2-o200k": O200K_STRINGS}
    for name, make in makers.items():
        if only and name != only:
            continue
        enc = make()
        print(f"// {name}")
        for s in STRINGS + extra.get(name, []):
            print("    {%s, {%s}}," % (json.dumps(s, ensure_ascii=False), ", ".join(map(str, enc(s)))))


if __name__ == "__main__":
    main()
