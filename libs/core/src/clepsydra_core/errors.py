"""The one error tree of Clepsydra.

Every error carries a stable ``code`` (the wire name in ``{"error": CODE, "message": ...}``)
and the HTTP status the edge translates it to. Where a SPEC rule applies, the message names it.
Expected outcomes (a put that was refused for a business reason) are values, not exceptions;
exceptions mean a request or a component is broken.
"""

from __future__ import annotations


class ClepsydraError(Exception):
    """Base of every error Clepsydra raises on purpose."""

    code = "SYSTEM_ERROR"
    http_status = 500

    def __init__(self, message: str, *, rule: str | None = None) -> None:
        self.rule = rule
        text = f"{message} (SPEC {rule})" if rule else message
        super().__init__(text)
        self.message = text

    def to_json(self) -> dict[str, str]:
        """The v1 error body."""
        return {"error": self.code, "message": self.message}


class ConfigError(ClepsydraError):
    """A setting is missing or malformed; raised at start-up, naming the variable or entry."""

    code = "CONFIG_ERROR"


class ValidationError(ClepsydraError):
    """A request breaks an input rule (SPEC P1, L2, ...); nothing was stored."""

    code = "INVALID_REQUEST"
    http_status = 400

    def __init__(self, message: str, *, rule: str | None = None, code: str | None = None) -> None:
        super().__init__(message, rule=rule)
        if code:
            self.code = code


class BodyTooLarge(ValidationError):
    """A body over its limit (SPEC P1): a message body over the largest message size, or a
    whole HTTP request body over a service's request limit (the message names which limit,
    and the setting that sets it). 413 with this one code from every service and every way
    in; nothing was stored (DEC-too-large-413)."""

    code = "BODY_TOO_LARGE"
    http_status = 413


class NotFound(ClepsydraError):
    """Base of the 404s."""

    code = "NOT_FOUND"
    http_status = 404


class TopicNotFound(NotFound):
    """A topic was named that the store does not have."""

    code = "TOPIC_NOT_EXIST"


class MessageNotFound(NotFound):
    """No message at the given msgId, CommitLog offset or key."""

    code = "MESSAGE_NOT_FOUND"


class GroupNotFound(NotFound):
    """A consumer group was named that has no settings (SPEC R2)."""

    code = "SUBSCRIPTION_GROUP_NOT_EXIST"


class AlreadyDelivered(ClepsydraError):
    """A cancel or reschedule of a delayed message already handed to its topic (SPEC T1)."""

    code = "ALREADY_DELIVERED"
    http_status = 409


class Fenced(ClepsydraError):
    """A scheduler's hand-over carries a fencing token older than one the store has already
    seen for that level (or the timers): a newer holder of the lease took over, and this
    caller's lease is gone (DEC-scheduler-lease). Nothing was handed over."""

    code = "FENCED"
    http_status = 409


class OffsetOutOfRange(ClepsydraError):
    """A queue offset or queue id outside what the queue holds: a 404, the position does not
    exist (a request can be well formed and still name one). A negative offset or
    queue id is malformed: a 400 with the same code."""

    code = "OFFSET_OUT_OF_RANGE"
    http_status = 404


class Forbidden(ClepsydraError):
    """The caller may not do this to this resource (a system topic, SPEC S3; a token whose
    role does not cover the action, docs/access-control.md)."""

    code = "FORBIDDEN"
    http_status = 403


class Unauthorized(ClepsydraError):
    """No bearer token, or one the service does not know (docs/access-control.md)."""

    code = "UNAUTHORIZED"
    http_status = 401


class RateLimited(ClepsydraError):
    """A token sent more requests a second than its limit (docs/access-control.md); the
    answer carries ``Retry-After`` (whole seconds)."""

    code = "RATE_LIMITED"
    http_status = 429

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class NoPermission(ClepsydraError):
    """The store does not accept writes now (SPEC R2)."""

    code = "NO_PERMISSION"
    http_status = 403


class DiskFull(ClepsydraError):
    """The store's disk is used past its high-water mark (``CLEPSYDRA_STORE_DISK_MAX_RATIO``):
    writes are refused, nothing of the request was stored."""

    code = "DISK_FULL"
    http_status = 507


class RemoteError(ClepsydraError):
    """A service answered with an error its client has no closer class for, or an answer
    that does not read as the wire type expected (then a 502)."""


class StoreError(ClepsydraError):
    """The store's files failed (I/O error, a broken invariant)."""

    code = "SYSTEM_ERROR"


class CorruptRecordError(StoreError):
    """Bytes that should hold a record or entry do not decode (bad size, magic or CRC)."""

    code = "CORRUPT_RECORD"


class Unavailable(ClepsydraError):
    """A service this one depends on did not answer; try again later."""

    code = "SERVICE_UNAVAILABLE"
    http_status = 503


class NotSent(Unavailable):
    """The service never received the request: the connection could not be made, or broke
    before the request was written. Nothing of it was done, so a client may send it elsewhere
    (a producer to another store shard, DEC-shard-send-retry)."""

