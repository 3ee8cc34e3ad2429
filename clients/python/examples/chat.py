#!/usr/bin/env python3
"""Streams a chat with a Cascade cluster through cascade-client.

    python3 examples/chat.py --server 127.0.0.1:50051 "What is the capital of France? Answer in English."
    python3 examples/chat.py --server 127.0.0.1:50051      # interactive: one message a line

Each answer is printed as it is generated; a line of usage follows on stderr.
"""
import argparse
import os
import sys

from cascade_client import CascadeError, Client


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="127.0.0.1:50051", help="the coordinator's address (default %(default)s)")
    ap.add_argument("--tls-ca", help="PEM bundle of the CA that issued the server's certificate (TLS; default: "
                    "$CASCADE_TLS_CA, else plaintext)")
    ap.add_argument("--system", help="a system message that opens the conversation")
    ap.add_argument("--max-tokens", type=int, default=256, help="tokens per answer at most (default %(default)s)")
    ap.add_argument("--temperature", type=float, help="0 = greedy (default: the server's, 0.8)")
    ap.add_argument("question", nargs="*", help="ask this once and exit (default: read messages from stdin)")
    args = ap.parse_args()

    messages = [{"role": "system", "content": args.system}] if args.system else []
    tls_ca = args.tls_ca or os.environ.get("CASCADE_TLS_CA") or None
    with Client(args.server, tls_ca=tls_ca, api_key=os.environ.get("CASCADE_API_KEY")) as client:
        try:
            client.wait_until_serving(timeout=60)
            questions = [" ".join(args.question)] if args.question else read_lines()
            for question in questions:
                messages.append({"role": "user", "content": question})
                answer = ""
                for chunk in client.stream(messages=messages, max_tokens=args.max_tokens,
                                           temperature=args.temperature):
                    print(chunk.text, end="", flush=True)
                    answer += chunk.text
                    if chunk.usage:
                        print(f"\n[{chunk.usage.completion_tokens} tokens, {chunk.finish_reason}, "
                              f"{chunk.usage.ttft_s:.2f} s to the first, {chunk.usage.total_s:.2f} s in all]",
                              file=sys.stderr)
                messages.append({"role": "assistant", "content": answer})
        except CascadeError as e:
            print(f"\nchat.py: {e}", file=sys.stderr)
            return 2
    return 0


def read_lines():
    """User messages from stdin, one a line, until an empty line or end of input."""
    while True:
        print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line.strip():
            return
        yield line.strip()


if __name__ == "__main__":
    sys.exit(main())
