"""One exception root, one class per outcome, one table to HTTP.

"Conflict: refresh and retry" (``CommitConflict``, 409) is kept apart from
"outcome unknown: reconcile" (``CommitStateUnknown``, 5xx): a client may retry
the first blindly, never the second. Every class carries the HTTP status and the
Iceberg error ``type`` so the API renders all errors in one shape.
"""

from __future__ import annotations

from typing import ClassVar

# Past this a message is cut: many quote what a client sent (a name, a value that failed
# its schema), and a 100 KB name must not come back whole in the answer nor fill the log.
MAX_MESSAGE_CHARS = 2000


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message``, cut to ``limit`` characters with a note of how much was left out."""
    if len(message) <= limit:
        return message
    kept = limit - 40
    return f"{message[:kept]}... ({len(message) - kept:,} more characters)"


class MetastoreError(Exception):
    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "InternalServerError"

    def __init__(self, message: str) -> None:
        message = bounded(message)
        super().__init__(message)
        self.message = message

    def to_body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.error_type, "code": self.status}}


class BadRequest(MetastoreError):
    status = 400
    error_type = "BadRequestException"


class InvalidName(BadRequest):
    pass


class InvalidPageToken(BadRequest):
    pass


class ValidationFailed(BadRequest):
    """A body violated its JSON Schema or a semantic rule."""


class PayloadTooLarge(MetastoreError):
    status = 413
    error_type = "RequestEntityTooLargeException"


class UnsupportedCoding(MetastoreError):
    """A request body in a content coding the node does not decode; the response's
    ``Accept-Encoding`` names those it does (``metastore.http.body_coding``)."""

    status = 415
    error_type = "UnsupportedMediaTypeException"


class Unauthorized(MetastoreError):
    status = 401
    error_type = "NotAuthorizedException"


class Forbidden(MetastoreError):
    """The caller is known but holds no grant for this: nothing was read or written."""

    status = 403
    error_type = "ForbiddenException"


class NotFound(MetastoreError):
    status = 404
    error_type = "NotFoundException"


class NoSuchTenant(NotFound):
    error_type = "NoSuchTenantException"


class NoSuchCatalog(NotFound):
    error_type = "NoSuchWarehouseException"


class NoSuchNamespace(NotFound):
    error_type = "NoSuchNamespaceException"


class NoSuchTable(NotFound):
    error_type = "NoSuchTableException"


class NoSuchView(NotFound):
    error_type = "NoSuchViewException"


class NoSuchCommit(NotFound):
    error_type = "NoSuchCommitException"


class NoSuchRef(NotFound):
    error_type = "NoSuchReferenceException"


class NoSuchRole(NotFound):
    error_type = "NoSuchRoleException"


class NoSuchGrant(NotFound):
    error_type = "NoSuchGrantException"


class AlreadyExists(MetastoreError):
    status = 409
    error_type = "AlreadyExistsException"


class NotEmpty(MetastoreError):
    status = 409
    error_type = "NamespaceNotEmptyException"


class CommitConflict(MetastoreError):
    """A requirement failed against the current state: refresh and retry."""

    status = 409
    error_type = "CommitFailedException"


class TooManyRequests(MetastoreError):
    """Over a limit that lifts in time (a tenant's quota): nothing was done; the
    response's ``Retry-After`` says when to try again."""

    status = 429
    error_type = "TooManyRequestsException"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = max(1, retry_after)


class MethodNotAllowed(MetastoreError):
    status = 405
    error_type = "MethodNotAllowedException"


class ServiceUnavailable(MetastoreError):
    """Nothing was written; the caller may retry later."""

    status = 503
    error_type = "ServiceUnavailableException"


class StorageUnavailable(ServiceUnavailable):
    """This node cannot reach a catalog's storage: the credentials its storage names are
    missing or unusable here. Nothing was written; another node (or this one, once its
    operator provides them) may succeed."""


class NotOwner(ServiceUnavailable):
    """Cluster mode: this node does not (or no longer) own the catalog's partition.

    Nothing was written. The node that received the client's request forwards it to
    the current owner and retries there (bounded); a client sees this only when no
    owner could be reached in time.
    """

    error_type = "NotOwnerException"

    def __init__(self, message: str, partition: int | None = None) -> None:
        super().__init__(message)
        self.partition = partition


class Fenced(NotOwner):
    """Cluster mode: a newer owner of the partition exists (its transaction fenced ours,
    or its barrier follows ours in the log).

    The fenced owner stops for good (taking over again would fence the newer owner
    back) and its queued writes fail with ``NotOwner``, so they are retried at the
    newer owner. A ``NotOwner`` itself, so wherever it surfaces it is answered as one.
    """


class CommitStateUnknown(MetastoreError):
    """The write may or may not have happened: reconcile before retrying."""

    status = 500
    error_type = "CommitStateUnknownException"


# Persistence-level outcomes: raised by backends, handled by the commit engine.


class RefConditionFailed(MetastoreError):
    """A compare-and-swap on a reference lost: the HEAD was not the expected one."""

    status = 409
    error_type = "CommitFailedException"


class ObjectConflict(MetastoreError):
    """An immutable object id was written again with different bytes (a bug, never retried)."""

    status = 500
    error_type = "InternalServerError"
