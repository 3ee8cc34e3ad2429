#!/usr/bin/env bash
# Writes the seed corpus of generate_request_fuzz (tests/fuzz/corpus/generate_request/):
# GenerateRequests in protobuf text format, serialised with `protoc --encode`. Rerun after
# changing a seed here or inference.proto; the outputs are committed.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=tests/fuzz/corpus/generate_request
mkdir -p "$out"
encode() {  # encode NAME TEXT_PROTO
  protoc --proto_path=proto --encode=cascade.v1.GenerateRequest proto/cascade/v1/inference.proto \
    <<<"$2" >"$out/$1.bin"
}
encode text 'request_id: "r1" prompt { text: "Hi the" } max_tokens: 8'
encode text_sampling 'prompt { text: "Hi!\n" } sampling { temperature: 0.7 top_k: 40 top_p: 0.9 min_p: 0.05
  repetition_penalty: 1.1 presence_penalty: 0.5 frequency_penalty: -0.5 seed: 42 }
  stop: "!" stop: "the" stop_ids: 2 ignore_eos: true logprobs: 3'
encode ids 'prompt { ids { ids: [1, 5, 300, 2] } } max_tokens: 1000 speculative { enabled: true num_tokens: 4 }'
encode chat 'prompt { chat { messages { role: "system" content: "be brief" }
  messages { role: "user" content: "Hi" } } } speculative { enabled: false }'
encode chat_named 'prompt { chat { messages { role: "user" content: "Hi" } chat_template: "llama3" } }
  sampling { temperature: 0 }'
encode invalid 'prompt { ids { ids: [-1] } } max_tokens: 0 logprobs: 99'
