"""The one exception of cascade-client."""
import grpc


class CascadeError(Exception):
    """A call the cluster refused or could not serve.

    `code` is the gRPC status code (`grpc.StatusCode.INVALID_ARGUMENT` for a malformed
    request, `UNAVAILABLE` while the cluster is degraded, `DEADLINE_EXCEEDED` past the
    call's timeout, ...), `message` the server's explanation, as Cascade's status codes
    cross gRPC unchanged.
    """

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> "CascadeError":
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "")
