#!/usr/bin/env python3
"""Load generator for any OpenAI-compatible server (Cascade's HTTP front, llama-server),
with the standard library only: streamed requests over http.client, one thread per
request in flight. Prints one JSON row (the keys of `cascade bench --json`).

  openai_load.py load URL --requests N --concurrency C --prompt-tokens P --max-tokens M
      N streamed /v1/completions requests, C at a time, each prompt P random token ids
      (distinct per request, so no prefix is shared), exactly M tokens generated (ignore_eos).
  openai_load.py chat URL --chats N --concurrency C --turns T --max-tokens M
      N multi-turn conversations, C at a time, through /v1/chat/completions: each turn sends
      the whole history (a shared system prompt, earlier questions and answers) plus a new
      question; reports TTFT of first turns and of later turns apart. --turn-order round
      runs turn t of every chat before turn t + 1 of any (each history must outlive every
      other chat's turn); --own-system-prompt gives each chat its own system prompt.
  openai_load.py mixed URL --streams S --long-prompt-tokens L --long-every-s T --duration-s D
      [--warmup-s W] [--stagger-s G]
      S clients decoding back to back while a long prompt arrives every T seconds: the
      streams' inter-token latency against the long prompts' TTFT (disaggregated serving),
      counted between W and D, the clients' starts spread over G.
"""
import argparse
import concurrent.futures
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def stream(url, path, body, timeout=600):
    """POSTs a streamed request; returns (ttft_s, [arrival times of text chunks], usage, error)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", path, json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return None, [], None, f"HTTP {r.status}: {r.read()[:200]!r}", ""
        times, usage, text = [], None, []
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                return None, times, None, str(event["error"]), ""
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                piece = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                if piece:
                    times.append(time.perf_counter() - t0)
                    text.append(piece)
        return (times[0] if times else None), times, usage, None, "".join(text)
    except Exception as e:  # noqa: BLE001 - any failure is a failed request, counted.
        return None, [], None, repr(e), ""
    finally:
        conn.close()


def run_all(fn, n, concurrency, errors):
    """Runs fn(0..n-1), `concurrency` at a time; prints the first errors; the wall time."""
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(fn, range(n)))
    for e in errors[:3]:
        print(f"openai_load: failed: {e}", file=sys.stderr)
    return time.perf_counter() - t0


def summary(label, wall, tokens, failures, ttft, itl, tpot, **extra):
    ms = lambda v: {"p50": 1e3 * percentile(v, 50), "p99": 1e3 * percentile(v, 99)}  # noqa: E731
    return {"label": label, **extra, "wall_s": wall, "output_tokens": tokens,
            "throughput_tok_s": tokens / wall if wall > 0 else 0.0, "failures": failures,
            "ttft_ms": ms(ttft), "itl_ms": ms(itl), "tpot_ms": ms(tpot)}


def run_load(a):
    lock = threading.Lock()
    ttft, itl, tpot, errors = [], [], [], []
    tokens = 0

    def one(i):
        nonlocal tokens
        rng = random.Random(1000 + i)
        prompt = [rng.randrange(200, 20000) for _ in range(a.prompt_tokens)]
        first, times, usage, err, _ = stream(a.url, "/v1/completions", {
            "model": a.model, "prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True})
        with lock:
            if err or usage is None:
                errors.append(err or "no usage")
                return
            tokens += usage["completion_tokens"]
            ttft.append(first)
            itl.extend(b - a_ for a_, b in zip(times, times[1:]))
            if usage["completion_tokens"] > 1:
                tpot.append((times[-1] - first) / (usage["completion_tokens"] - 1))

    wall = run_all(one, a.requests, a.concurrency, errors)
    return summary(a.label, wall, tokens, len(errors), ttft, itl, tpot, requests=a.requests,
                   concurrency=a.concurrency, prompt_tokens=a.prompt_tokens, max_tokens=a.max_tokens)


SYSTEM = ("You are a patient tutor. Answer every question in plain words, with one short example, "
          "and never more than three sentences. ") * 12
TOPICS = ["rivers", "volcanoes", "bridges", "owls", "comets", "glaciers", "deserts", "tides", "forests", "bees",
          "lighthouses", "clouds", "mountains", "coral", "trains", "maps"]


def run_chat(a):
    lock = threading.Lock()
    first_ttft, later_ttft, itl, errors, cached = [], [], [], [], []
    tokens = 0
    # --own-system-prompt: each chat's system prompt starts with its index, so no two chats
    # share a KV block (a long per-chat context, as a document-grounded chat has).
    histories = [[{"role": "system", "content": (f"Chat {i}. " if a.own_system_prompt else "") + SYSTEM}]
                 for i in range(a.chats)]
    failed = set()

    def turn_of(i, turn):
        nonlocal tokens
        if i in failed:
            return
        messages = histories[i]
        topic = TOPICS[(i + turn) % len(TOPICS)]
        messages.append({"role": "user", "content": f"Question {turn + 1} of chat {i}: tell me about {topic}."})
        first, times, usage, err, text = stream(a.url, "/v1/chat/completions", {
            "model": a.model, "messages": messages, "max_tokens": a.max_tokens, "temperature": 0,
            "ignore_eos": True})
        with lock:
            if err or usage is None:
                errors.append(err or "no usage")
                failed.add(i)
                return
            tokens += usage["completion_tokens"]
            (first_ttft if turn == 0 else later_ttft).append(first)
            itl.extend(b - a_ for a_, b in zip(times, times[1:]))
            if turn > 0:
                details = usage.get("prompt_tokens_details") or {}
                cached.append((details.get("cached_tokens", 0), usage["prompt_tokens"]))
        messages.append({"role": "assistant", "content": text})

    if a.turn_order == "chat":  # Each conversation's turns back to back.
        wall = run_all(lambda i: [turn_of(i, t) for t in range(a.turns)], a.chats, a.concurrency, errors)
    else:  # "round": turn t of every chat, then turn t + 1 of every chat.
        wall = sum(run_all(lambda i, t=t: turn_of(i, t), a.chats, a.concurrency, errors) for t in range(a.turns))
    ms = lambda v: {"p50": 1e3 * percentile(v, 50), "p99": 1e3 * percentile(v, 99), "mean": 1e3 * sum(v) / max(1, len(v))}  # noqa: E731
    out = summary(a.label, wall, tokens, len(errors), first_ttft + later_ttft, itl, [], chats=a.chats,
                  concurrency=a.concurrency, turns=a.turns, max_tokens=a.max_tokens, turn_order=a.turn_order,
                  own_system_prompt=a.own_system_prompt)
    out["ttft_first_turn_ms"] = ms(first_ttft)
    out["ttft_later_turns_ms"] = ms(later_ttft)
    out["later_turn_prompt_tokens"] = sum(p for _, p in cached)
    out["later_turn_cached_tokens"] = sum(c for c, _ in cached)
    return out


def run_mixed(a):
    """`--streams` clients decode back to back (prompts of --prompt-tokens, --max-tokens each)
    while a request with a --long-prompt-tokens prompt (--long-max-tokens) arrives every
    --long-every-s seconds, for --duration-s; the streams' inter-token latency against the
    long prompts' TTFT.

    Steady state: client i starts i / streams of --stagger-s late (clients started together
    stay in step, their prompts arriving as one burst every round), and only what happens
    between --warmup-s and --duration-s counts: the streams' TTFTs and inter-token gaps, and
    the tokens (a request's usage spread over its chunks) over that window's length."""
    lock = threading.Lock()
    itl, stream_ttft, long_ttft, errors = [], [], [], []
    tokens = 0.0
    t0 = time.perf_counter()
    end = t0 + a.duration_s
    begin = t0 + min(a.warmup_s, a.duration_s)

    def counted(start, times, usage):
        """The tokens of a request whose chunks arrived at start + times that fall in the window."""
        inside = sum(begin <= start + t <= end for t in times)
        return usage["completion_tokens"] * inside / max(1, len(times))

    def request(seed, n_prompt, max_tokens):
        rng = random.Random(seed)
        prompt = [rng.randrange(200, 20000) for _ in range(n_prompt)]
        return stream(a.url, "/v1/completions", {"model": a.model, "prompt": prompt, "max_tokens": max_tokens,
                                                "temperature": 0, "ignore_eos": True})

    def streamer(i):
        nonlocal tokens
        time.sleep(a.stagger_s * i / max(1, a.streams))
        k = 0
        while time.perf_counter() < end:
            start = time.perf_counter()
            first, times, usage, err, _ = request(1000 * i + k, a.prompt_tokens, a.max_tokens)
            k += 1
            with lock:
                if err or usage is None:
                    errors.append(err or "no usage")
                    return
                tokens += counted(start, times, usage)
                if begin <= start + first <= end:
                    stream_ttft.append(first)
                itl.extend(b - a_ for a_, b in zip(times, times[1:]) if begin <= start + b <= end)

    def long_one(i):
        nonlocal tokens
        start = time.perf_counter()
        first, times, usage, err, _ = request(7_000_000 + i, a.long_prompt_tokens, a.long_max_tokens)
        with lock:
            if err or usage is None:
                errors.append(err or "no usage")
                return
            tokens += counted(start, times, usage)
            long_ttft.append(first)

    threads = [threading.Thread(target=streamer, args=(i,)) for i in range(a.streams)]
    for t in threads:
        t.start()
    i = 0
    while a.long_every_s > 0 and time.perf_counter() + a.long_every_s < end:
        time.sleep(a.long_every_s)
        t = threading.Thread(target=long_one, args=(i,))
        t.start()
        threads.append(t)
        i += 1
    for t in threads:
        t.join()
    wall = end - begin  # The window the counts come from.
    for e in errors[:3]:
        print(f"openai_load: failed: {e}", file=sys.stderr)
    ms = lambda v: {"p50": 1e3 * percentile(v, 50), "p99": 1e3 * percentile(v, 99),  # noqa: E731
                    "p999": 1e3 * percentile(v, 99.9), "max": 1e3 * max(v, default=0.0), "n": len(v)}
    out = summary(a.label, wall, tokens, len(errors), stream_ttft, itl, [], streams=a.streams,
                  prompt_tokens=a.prompt_tokens, max_tokens=a.max_tokens, long_prompt_tokens=a.long_prompt_tokens,
                  long_max_tokens=a.long_max_tokens, long_every_s=a.long_every_s, duration_s=a.duration_s,
                  warmup_s=a.warmup_s, stagger_s=a.stagger_s)
    out["itl_ms"] = ms(itl)
    out["long_ttft_ms"] = ms(long_ttft)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["load", "chat", "mixed"])
    p.add_argument("url", help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", default=None)
    p.add_argument("--label", default="")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--chats", type=int, default=16)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--turn-order", choices=["chat", "round"], default="chat",
                   help="chat: each conversation's turns back to back; round: turn t of every chat, then t + 1")
    p.add_argument("--own-system-prompt", action="store_true", help="a distinct system prompt per chat")
    p.add_argument("--streams", type=int, default=32, help="mixed: clients decoding back to back")
    p.add_argument("--long-prompt-tokens", type=int, default=2048, help="mixed: the long prompts' length")
    p.add_argument("--long-max-tokens", type=int, default=16, help="mixed: tokens generated for each long prompt")
    p.add_argument("--long-every-s", type=float, default=2.0, help="mixed: a long prompt arrives this often")
    p.add_argument("--duration-s", type=float, default=30.0, help="mixed: how long new requests start")
    p.add_argument("--warmup-s", type=float, default=0.0, help="mixed: what happens before this is not counted")
    p.add_argument("--stagger-s", type=float, default=0.0, help="mixed: the streams' starts spread over this")
    p.add_argument("--json", help="also write the row here")
    a = p.parse_args()
    row = {"load": run_load, "chat": run_chat, "mixed": run_mixed}[a.mode](a)
    print(json.dumps(row))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f, indent=1)
    sys.exit(1 if row["failures"] else 0)


if __name__ == "__main__":
    main()
