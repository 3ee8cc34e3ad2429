"""cascade-client: a typed Python client of a Cascade cluster.

    from cascade_client import Client
    with Client("127.0.0.1:50051") as c:
        print(c.generate("The capital of France is", max_tokens=16, temperature=0).text)
        for chunk in c.stream(messages=[{"role": "user", "content": "Tell me a joke"}]):
            print(chunk.text, end="", flush=True)
"""
from cascade_client.client import Client, build_request
from cascade_client.errors import CascadeError
from cascade_client.results import (ClusterStatus, GenerateResult, Message, ModelInfo, SpeculativeStats, StreamChunk,
                                    TokenLogprob, Tokens, Usage, WorkerStatus)

__version__ = "0.1.0"
__all__ = ["Client", "CascadeError", "build_request", "ClusterStatus", "GenerateResult", "Message", "ModelInfo",
           "SpeculativeStats", "StreamChunk", "TokenLogprob", "Tokens", "Usage", "WorkerStatus"]
