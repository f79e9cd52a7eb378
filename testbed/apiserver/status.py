"""Kubernetes ``Status`` failures: the error bodies every API response uses.

Handlers raise :class:`ApiError`; the HTTP shell turns it into a ``Status`` object with the
same ``reason``/``code`` pairs and message shapes a real API server sends, so clients
(client-go, the official Python client, trio-typha's watcher) take their real error paths.
"""

from __future__ import annotations

from typing import Any, Protocol


class KindLike(Protocol):
    """What the API layer needs to know about a kind (ResourceKind and ServedKind fit)."""

    @property
    def group(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def plural(self) -> str: ...
    @property
    def namespaced(self) -> bool: ...


class ApiError(Exception):
    """A request failed; carries the fields of the ``Status`` object to send."""

    def __init__(self, code: int, reason: str, message: str,
                 details: dict[str, Any] | None = None, *,
                 metadata: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.metadata = metadata or {}

    def status(self) -> dict[str, Any]:
        return failure_status(self.code, self.reason, self.message, self.details,
                              self.metadata)


def failure_status(code: int, reason: str, message: str,
                   details: dict[str, Any] | None = None,
                   metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": metadata or {},
                            "status": "Failure", "message": message, "reason": reason}
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def resource_name(kind: KindLike) -> str:
    """``pods`` for core kinds, ``networkpolicies.networking.k8s.io`` otherwise."""
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


def _details(kind: KindLike, name: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name is not None:
        details["name"] = name
    if kind.group:
        details["group"] = kind.group
    details["kind"] = kind.plural
    return details


def not_found(kind: KindLike, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource_name(kind)} "{name}" not found',
                    _details(kind, name))


def no_such_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(kind: KindLike, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{resource_name(kind)} "{name}" already exists',
                    _details(kind, name))


def conflict(kind: KindLike, name: str, why: str = "") -> ApiError:
    why = why or ("the object has been modified; please apply your changes to the latest "
                  "version and try again")
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {resource_name(kind)} "{name}": {why}',
                    _details(kind, name))


def invalid(kind: KindLike, name: str, field: str, why: str) -> ApiError:
    message = f'{kind.kind} "{name}" is invalid: {field}: {why}'
    details = _details(kind, name)
    details["kind"] = kind.kind
    details["causes"] = [{"reason": "FieldValueInvalid", "message": why, "field": field}]
    return ApiError(422, "Invalid", message, details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str, metadata: dict[str, Any] | None = None) -> ApiError:
    """410: a resourceVersion or continue token from before the retained history."""
    return ApiError(410, "Expired", message, metadata=metadata)


def too_old_resource_version(requested: int, oldest: int) -> ApiError:
    return expired(f"too old resource version: {requested} ({oldest})")


def too_large_resource_version(requested: int, current: int) -> ApiError:
    return ApiError(504, "Timeout",
                    f"Too large resource version: {requested}, current: {current}",
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1})


def forbidden(kind: KindLike, verb: str, namespace: str | None, user: str) -> ApiError:
    """The RBAC denial message shape of kube-apiserver."""
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = (f'{resource_name(kind)} is forbidden: User "{user}" cannot {verb} resource '
               f'"{kind.plural}" in API group "{kind.group}" {scope}')
    return ApiError(403, "Forbidden", message, _details(kind))


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed",
                    f"the server does not allow this method on the requested resource ({method})")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: application/json-patch+json, application/merge-patch+json "
                    f"(got {content_type!r})")


def too_large_body(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge",
                    f"request entity too large: limit is {limit} bytes")


def internal_error(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")
