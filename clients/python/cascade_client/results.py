"""The typed results of cascade-client: plain frozen dataclasses built from the protos."""
from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class Message:
    """One chat message."""
    role: str  # "system", "user" or "assistant".
    content: str


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability and, when asked for, the most likely ones."""
    id: int
    logprob: float
    top: List[Tuple[int, float]] = field(default_factory=list)  # (id, logprob), best first.


@dataclass(frozen=True)
class SpeculativeStats:
    """What speculative decoding did for a request (or the cluster, in ClusterStatus)."""
    steps: int  # Verify steps that carried drafts.
    drafted_tokens: int
    accepted_tokens: int
    acceptance_rate: float  # accepted / drafted.
    mean_accepted_length: float  # Tokens emitted per verify step.
    draft_s: float
    verify_s: float


@dataclass(frozen=True)
class Usage:
    """Token counts and timings of one request."""
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float  # Seconds from arrival to the first token.
    total_s: float  # Seconds from arrival to the end.
    speculative: Optional[SpeculativeStats] = None  # Set when the request was speculated.
    expert_load_max_mean: float = 0.0  # MoE models only (0 for dense ones).


@dataclass(frozen=True)
class GenerateResult:
    """A whole generation (`Client.generate`)."""
    text: str  # Without any stop string.
    token_ids: List[int]
    prompt_ids: List[int]  # The prompt as the model saw it, as token ids.
    finish_reason: str  # "stop" (EOS, a stop id or string) or "length".
    usage: Usage
    request_id: str
    logprobs: List[TokenLogprob] = field(default_factory=list)
    reasoning: str = ""  # A harmony chat's analysis channel (gpt-oss), apart from `text`.


@dataclass(frozen=True)
class StreamChunk:
    """One message of a stream (`Client.stream`): the tokens of one step and their text.
    The last chunk carries `finish_reason` and `usage`."""
    text: str
    token_ids: List[int]
    request_id: str
    finish_reason: Optional[str] = None
    usage: Optional[Usage] = None
    logprobs: List[TokenLogprob] = field(default_factory=list)
    reasoning: str = ""  # New reasoning (a harmony chat's analysis channel).


@dataclass(frozen=True)
class Tokens:
    """A prompt as token ids, with the vocabulary text of each (`Client.tokenize`)."""
    ids: List[int]
    pieces: List[str]


@dataclass(frozen=True)
class ModelInfo:
    """The served model (`Client.model_info`)."""
    name: str
    path: str
    arch: str
    n_layers: int
    n_embd: int
    n_heads: int
    n_kv_heads: int
    n_ff: int
    n_vocab: int
    max_context: int  # Positions per sequence the cluster serves.
    chat_template: str  # Detected template name, or empty.
    n_experts: int  # MoE: routed experts per layer (0: dense).
    n_experts_used: int


@dataclass(frozen=True)
class WorkerStatus:
    """One worker: a pipeline stage, or one tensor-parallel rank of it, or the drafter."""
    stage: int
    tp_rank: int
    first_layer: int  # Layers [first_layer, last_layer).
    last_layer: int
    node: str
    device: str
    address: str
    state: str  # "waiting", "registered", "loading", "ready" or "dead".
    draft: bool
    weight_bytes: int
    kv_bytes: int


@dataclass(frozen=True)
class ClusterStatus:
    """The plan, the workers, KV usage and scheduler counters (`Client.cluster_status`)."""
    ready: bool
    state: str  # "starting", "ready" or "degraded".
    detail: str  # Why it is not ready, when it is not.
    workers: List[WorkerStatus]
    kv_blocks_total: int
    kv_blocks_free: int
    kv_block_size: int
    kv_cache_dtype: str
    running: int
    waiting: int
    steps: int
    preemptions: int
    requests_finished: int
    drafter: str  # "ngram", "self", "model" or empty.
    speculative: Optional[SpeculativeStats] = None
