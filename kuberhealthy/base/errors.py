"""Our exception types. kube/ translates API status codes into these; nothing above it sees ApiException.

A failed check is not an exception: it is a result recorded in a khstate.
"""
from __future__ import annotations


class KuberhealthyError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(KuberhealthyError):
    """A configuration value is unusable; `key` names it so the operator can fix it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config key {key!r}: {message}")
        self.key = key


class ApiError(KuberhealthyError):
    """The API server answered with an error status (or could not be reached: status 0)."""

    status = 0

    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.reason = reason


class Unreachable(ApiError):
    """No answer: connection refused, reset, or timed out."""


class NoFreeConnection(Unreachable):
    """Every request slot of this client was taken for the request's whole timeout: the request was never
    sent. Transient like any Unreachable, but the bottleneck is this process's own requests queued ahead
    of it (the API server answers them slowly), so asking again at once only queues again."""


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    """409: a stale resourceVersion, or (reason AlreadyExists) a create of an existing name."""

    status = 409

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"


class Gone(ApiError):
    """410: the resourceVersion is too old; re-list."""

    status = 410


class Invalid(ApiError):
    status = 422


class TooManyRequests(ApiError):
    """429: throttled, or an eviction blocked by a PodDisruptionBudget."""

    status = 429


class ServerError(ApiError):
    """5xx: the API server (or what stands before it) failed; worth retrying."""

    status = 500


class ServiceUnavailable(ServerError):
    """503: the API server (or a proxy before it) is overloaded or starting."""

    status = 503


class GatewayTimeout(ServerError):
    """504: the request did not finish in time behind a proxy or in the API server (etcd slow)."""

    status = 504


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls for cls in (BadRequest, Unauthorized, Forbidden, NotFound, Conflict, Gone, Invalid,
                                TooManyRequests, ServerError, ServiceUnavailable, GatewayTimeout)
}


def error_for_status(status: int, message: str, reason: str = "") -> ApiError:
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(message, status=status, reason=reason)


def is_transient(e: BaseException) -> bool:
    """The control plane is away or overloaded (no answer, 5xx, 429): the same call may succeed soon.

    Such an error says nothing about the check being run, so it must never fail one.
    """
    return isinstance(e, (Unreachable, ServerError, TooManyRequests)) or (isinstance(e, ApiError) and e.status == 0)
