"""`Client`: a Cascade cluster's public API (cascade.v1.Inference) and its health service."""
from typing import Iterator, List, Mapping, Optional, Sequence, Tuple, Union
import os
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cascade_client._proto.cascade.v1 import inference_pb2 as pb
from cascade_client._proto.cascade.v1 import inference_pb2_grpc as pb_grpc
from cascade_client.errors import CascadeError
from cascade_client.results import (ClusterStatus, GenerateResult, Message, ModelInfo, SpeculativeStats, StreamChunk,
                                    TokenLogprob, Tokens, Usage, WorkerStatus)

# A prompt: plain text, or ready token ids.
Prompt = Union[str, Sequence[int]]
# A chat: messages as `Message`, {"role": ..., "content": ...} or (role, content).
Messages = Sequence[Union[Message, Mapping[str, str], Tuple[str, str]]]

_FINISH = {pb.FINISH_REASON_STOP: "stop", pb.FINISH_REASON_LENGTH: "length"}


class Client:
    """A connection to a Cascade coordinator (`host:port`), over one gRPC channel:
    plaintext, or TLS with `tls_ca`.

    `tls_ca` is the CA bundle (PEM) that verifies the server's certificate: a file's path,
    or the PEM itself as bytes. The certificate must name the host in `address` (an IP
    address needs an IP subjectAltName). Without it the channel is plaintext, and a server
    that serves TLS answers every call with UNAVAILABLE. `api_key` is sent as
    `authorization: Bearer KEY` when the server wants keys (its security.api_keys_file).

    Every call takes the client's `timeout` (seconds; None = no deadline) unless given its
    own; past it the request is cancelled on the server and `CascadeError` is raised with
    DEADLINE_EXCEEDED. Any refused or failed call raises `CascadeError` carrying the gRPC
    code and message. Thread-safe, like the gRPC channel under it. Use it as a context
    manager, or call `close()`, to close the channel.
    """

    def __init__(self, address: str, timeout: Optional[float] = 600.0,
                 options: Sequence[Tuple[str, Union[int, str]]] = (), api_key: Optional[str] = None,
                 tls_ca: Optional[Union[str, bytes, "os.PathLike[str]"]] = None):
        self.address = address
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
        if tls_ca is None:
            self._channel = grpc.insecure_channel(address, options=list(options))
        else:
            credentials = grpc.ssl_channel_credentials(root_certificates=_read_ca(tls_ca))
            self._channel = grpc.secure_channel(address, credentials, options=list(options))
        self._stub = pb_grpc.InferenceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    # --- Generation -------------------------------------------------------------------

    def generate(self, prompt: Optional[Prompt] = None, *, messages: Optional[Messages] = None,
                 timeout: Optional[float] = None, **params) -> GenerateResult:
        """Generates a whole answer to `prompt` (text or token ids) or `messages` (a chat,
        rendered with the model's template, or `chat_template=`). Generation parameters
        (all optional; unset ones take the server's defaults, those of `cascade run`):
        `max_tokens`, `temperature` (0 = greedy), `top_k`, `top_p`, `min_p`,
        `repetition_penalty`, `presence_penalty`, `frequency_penalty`, `seed`, `stop` (a
        string or strings), `stop_ids`, `ignore_eos`, `logprobs` (top-n per token),
        `speculate` (False: plain decoding), `draft_tokens`, `chat_template`, `request_id`.
        """
        req = build_request(prompt, messages, **params)
        try:
            resp = self._stub.Complete(req, timeout=self._timeout(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise CascadeError.from_rpc_error(e) from None
        return GenerateResult(text=resp.text, token_ids=list(resp.token_ids), prompt_ids=list(resp.prompt_ids),
                              finish_reason=resp.finish_reason or _FINISH.get(resp.finish, ""),
                              usage=_usage(resp.usage), request_id=resp.request_id,
                              logprobs=_logprobs(resp.logprobs), reasoning=resp.reasoning)

    def stream(self, prompt: Optional[Prompt] = None, *, messages: Optional[Messages] = None,
               timeout: Optional[float] = None, **params) -> Iterator[StreamChunk]:
        """Streams the answer as it is generated: one `StreamChunk` per step (its new
        tokens and text); the last carries `finish_reason` and `usage`. Takes the
        arguments of `generate`. Closing the iterator early cancels the request."""
        req = build_request(prompt, messages, **params)
        call = self._stub.Generate(req, timeout=self._timeout(timeout), metadata=self._metadata)
        try:
            for resp in call:
                last = resp.HasField("usage") or bool(resp.finish_reason)
                yield StreamChunk(text=resp.text, token_ids=list(resp.token_ids), request_id=resp.request_id,
                                  finish_reason=(resp.finish_reason or _FINISH.get(resp.finish, "")) if last else None,
                                  usage=_usage(resp.usage) if last else None, logprobs=_logprobs(resp.logprobs),
                                  reasoning=resp.reasoning)
        except grpc.RpcError as e:
            raise CascadeError.from_rpc_error(e) from None
        finally:
            call.cancel()  # A no-op once the stream ended; frees the request when abandoned.

    # --- Model and cluster ------------------------------------------------------------

    def tokenize(self, text: Optional[str] = None, *, messages: Optional[Messages] = None,
                 add_special: bool = False, chat_template: str = "", timeout: Optional[float] = None) -> Tokens:
        """The token ids of `text` (BOS/EOS added as the model says with `add_special`) or
        of `messages` rendered with the chat template, and each id's vocabulary text."""
        req = pb.TokenizeRequest(add_special=add_special)
        _fill_prompt(req.prompt, text, messages, chat_template)
        resp = self._call(self._stub.Tokenize, req, timeout)
        return Tokens(ids=list(resp.ids), pieces=list(resp.pieces))

    def model_info(self, timeout: Optional[float] = None) -> ModelInfo:
        """The served model's configuration."""
        m = self._call(self._stub.GetModelInfo, pb.ModelInfoRequest(), timeout)
        return ModelInfo(name=m.name, path=m.path, arch=m.arch, n_layers=m.n_layers, n_embd=m.n_embd,
                         n_heads=m.n_heads, n_kv_heads=m.n_kv_heads, n_ff=m.n_ff, n_vocab=m.n_vocab,
                         max_context=m.max_context, chat_template=m.chat_template, n_experts=m.n_experts,
                         n_experts_used=m.n_experts_used)

    def cluster_status(self, timeout: Optional[float] = None) -> ClusterStatus:
        """The plan, every worker's state, KV usage and the scheduler's counters."""
        s = self._call(self._stub.GetClusterStatus, pb.ClusterStatusRequest(), timeout)
        workers = [WorkerStatus(stage=w.stage, tp_rank=w.tp_rank, first_layer=w.first_layer, last_layer=w.last_layer,
                                node=w.node, device=w.device, address=w.worker_address, state=w.state, draft=w.draft,
                                weight_bytes=w.weight_bytes, kv_bytes=w.kv_bytes) for w in s.stages]
        return ClusterStatus(ready=s.ready, state=s.state, detail=s.detail, workers=workers,
                             kv_blocks_total=s.kv_blocks_total, kv_blocks_free=s.kv_blocks_free,
                             kv_block_size=s.kv_block_size, kv_cache_dtype=s.kv_cache_dtype, running=s.running,
                             waiting=s.waiting, steps=s.steps, preemptions=s.preemptions,
                             requests_finished=s.requests_finished, drafter=s.drafter,
                             speculative=_speculative(s.speculative) if s.drafter else None)

    def health(self, service: str = "", timeout: Optional[float] = None) -> str:
        """grpc.health.v1's status of `service` ("" = the whole server,
        "cascade.v1.Inference" = the API): "SERVING" while every worker is ready,
        "NOT_SERVING" while the cluster starts or a worker is dead."""
        resp = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service), timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    def wait_until_serving(self, timeout: float = 120.0, poll_s: float = 0.2) -> None:
        """Waits until `health()` says SERVING; CascadeError(DEADLINE_EXCEEDED) after `timeout` s."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                last = self.health(timeout=max(poll_s, 1.0))
                if last == "SERVING":
                    return
            except CascadeError as e:
                last = str(e)
            time.sleep(poll_s)
        raise CascadeError(grpc.StatusCode.DEADLINE_EXCEEDED, f"{self.address} not serving after {timeout} s ({last})")

    # --- Helpers ------------------------------------------------------------------------

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    def _call(self, method, request, timeout: Optional[float]):
        try:
            return method(request, timeout=self._timeout(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise CascadeError.from_rpc_error(e) from None


def _read_ca(tls_ca: Union[str, bytes, "os.PathLike[str]"]) -> bytes:
    """The PEM of `tls_ca`: bytes as they are, else the file at that path (OSError when it
    cannot be read); ValueError when it holds no certificate."""
    if isinstance(tls_ca, bytes):
        pem = tls_ca
    else:
        with open(os.fspath(tls_ca), "rb") as f:
            pem = f.read()
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError(f"tls_ca: {'the bytes given' if isinstance(tls_ca, bytes) else repr(os.fspath(tls_ca))} "
                         "hold no PEM certificate")
    return pem


def build_request(prompt: Optional[Prompt] = None, messages: Optional[Messages] = None, *,
                  max_tokens: Optional[int] = None, temperature: Optional[float] = None, top_k: Optional[int] = None,
                  top_p: Optional[float] = None, min_p: Optional[float] = None,
                  repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
                  frequency_penalty: Optional[float] = None, seed: Optional[int] = None,
                  stop: Union[str, Sequence[str], None] = None, stop_ids: Sequence[int] = (), ignore_eos: bool = False,
                  logprobs: int = 0, speculate: Optional[bool] = None, draft_tokens: Optional[int] = None,
                  chat_template: str = "", request_id: str = "") -> pb.GenerateRequest:
    """The GenerateRequest of `Client.generate`'s arguments (unset ones stay unset, so the
    server applies its defaults). TypeError for a malformed prompt; values are checked by
    the server (CascadeError with INVALID_ARGUMENT)."""
    req = pb.GenerateRequest(request_id=request_id, ignore_eos=ignore_eos, logprobs=logprobs)
    _fill_prompt(req.prompt, prompt, messages, chat_template)
    if max_tokens is not None:
        req.max_tokens = max_tokens
    sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p,
                "repetition_penalty": repetition_penalty, "presence_penalty": presence_penalty,
                "frequency_penalty": frequency_penalty, "seed": seed}
    for name, value in sampling.items():
        if value is not None:
            setattr(req.sampling, name, value)
    req.stop.extend([stop] if isinstance(stop, str) else list(stop or ()))
    req.stop_ids.extend(stop_ids)
    if speculate is not None:
        req.speculative.enabled = speculate
    if draft_tokens is not None:
        req.speculative.num_tokens = draft_tokens
    return req


def _fill_prompt(out: pb.Prompt, prompt: Optional[Prompt], messages: Optional[Messages], chat_template: str) -> None:
    if (prompt is None) == (messages is None):
        raise TypeError("give exactly one of prompt (text or token ids) and messages")
    if messages is not None:
        out.chat.chat_template = chat_template
        for m in messages:
            role, content = _message(m)
            out.chat.messages.add(role=role, content=content)
    elif isinstance(prompt, str):
        out.text = prompt
    else:
        out.ids.ids.extend(int(i) for i in prompt)


def _message(m) -> Tuple[str, str]:
    if isinstance(m, Message):
        return m.role, m.content
    if isinstance(m, Mapping):
        return m["role"], m["content"]
    role, content = m
    return role, content


def _speculative(s: pb.SpeculativeStats) -> SpeculativeStats:
    return SpeculativeStats(steps=s.steps, drafted_tokens=s.drafted_tokens, accepted_tokens=s.accepted_tokens,
                            acceptance_rate=s.acceptance_rate, mean_accepted_length=s.mean_accepted_length,
                            draft_s=s.draft_s, verify_s=s.verify_s)


def _usage(u: pb.Usage) -> Usage:
    return Usage(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, ttft_s=u.ttft_s,
                 total_s=u.total_s, speculative=_speculative(u.speculative) if u.HasField("speculative") else None,
                 expert_load_max_mean=u.expert_load_max_mean)


def _logprobs(lps) -> List[TokenLogprob]:
    return [TokenLogprob(id=t.id, logprob=t.logprob, top=[(x.id, x.logprob) for x in t.top]) for t in lps]
