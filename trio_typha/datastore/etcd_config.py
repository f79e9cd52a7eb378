"""How Typha is told where etcd is: ``TYPHA_ETCD*`` settings into an :class:`EtcdConfig`.

In etcd mode Typha reads only its own parameters (not the generic ``ETCD_*`` variables):
``EtcdEndpoints`` (comma list of ``scheme://host:port``) or else ``EtcdScheme`` +
``EtcdAddr`` (default ``http://127.0.0.1:2379``), and the client TLS files ``EtcdKeyFile``,
``EtcdCertFile``, ``EtcdCaFile``.  :func:`etcd_config_from_settings` is pure apart from
checking that named files exist, so the daemon's config loader can call it.
"""

from __future__ import annotations

import os
import re
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

DEFAULT_SCHEME = "http"
DEFAULT_ADDR = "127.0.0.1:2379"

_PARAMS = ("etcdendpoints", "etcdscheme", "etcdaddr", "etcdkeyfile", "etcdcertfile",
           "etcdcafile")
_AUTHORITY = re.compile(r"^[^:/]+:[0-9]{1,5}$")


class EtcdConfigError(ValueError):
    """An etcd setting is invalid; ``variable`` is the environment variable to fix."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


@dataclass(frozen=True, slots=True)
class EtcdConfig:
    """Where etcd is and how to authenticate to it."""

    endpoints: tuple[str, ...] = (f"{DEFAULT_SCHEME}://{DEFAULT_ADDR}/",)
    key_file: str = ""
    cert_file: str = ""
    ca_file: str = ""

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context for ``https`` endpoints (CA file, else the system CAs)."""
        ctx = ssl.create_default_context(cafile=self.ca_file or None)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file or None)
        return ctx


def _var(param: str) -> str:
    return f"TYPHA_{param.upper()}"


def _normalise(settings: Mapping[str, str]) -> dict[str, str]:
    """Settings by lower-case parameter name; accepts ``EtcdAddr`` or ``TYPHA_ETCDADDR``.

    Empty values are ignored (the default stays) and ``none`` means the empty value, as
    for every Typha parameter.
    """
    out: dict[str, str] = {}
    for raw_name, value in settings.items():
        name = raw_name.lower()
        if name.startswith("typha_"):
            name = name[len("typha_"):]
        if name not in _PARAMS or value == "":
            continue
        out[name] = "" if value.lower() == "none" else value
    return out


def _endpoint(text: str) -> str:
    url = urllib.parse.urlsplit(text.strip())
    var = _var("etcdendpoints")
    if url.scheme not in ("http", "https"):
        raise EtcdConfigError(var, f"{text!r}: scheme must be http or https")
    if not url.hostname:
        raise EtcdConfigError(var, f"{text!r}: no host")
    try:
        url.port  # noqa: B018 - validates the port
    except ValueError:
        raise EtcdConfigError(var, f"{text!r}: invalid port") from None
    if url.username is not None or url.query or url.fragment:
        raise EtcdConfigError(var, f"{text!r}: user info, query and fragment are not allowed")
    if url.path not in ("", "/"):
        raise EtcdConfigError(var, f"{text!r}: path must be empty or '/'")
    return f"{url.scheme}://{url.netloc}/"


def etcd_config_from_settings(settings: Mapping[str, str]) -> EtcdConfig:
    """Build an :class:`EtcdConfig` from Typha settings; raises :class:`EtcdConfigError`.

    ``settings`` maps parameter names (any case, with or without the ``TYPHA_`` prefix) to
    raw string values, e.g. ``os.environ``.  Unlike Typha, which replaces a bad value with
    the default and logs a warning, a bad value here is an error naming its variable: a
    silently dropped TLS file would turn into a confusing connection failure later.
    """
    s = _normalise(settings)
    files = {}
    for param in ("etcdkeyfile", "etcdcertfile", "etcdcafile"):
        path = s.get(param, "")
        if path and not os.path.exists(path):
            raise EtcdConfigError(_var(param), f"file {path!r} does not exist")
        files[param] = path
    if bool(files["etcdkeyfile"]) != bool(files["etcdcertfile"]):
        missing = "etcdcertfile" if files["etcdkeyfile"] else "etcdkeyfile"
        raise EtcdConfigError(_var(missing), "the etcd client key and certificate go together")

    raw_endpoints = s.get("etcdendpoints", "")
    if raw_endpoints:
        endpoints = tuple(_endpoint(e) for e in raw_endpoints.split(",") if e.strip())
        if not endpoints:
            raise EtcdConfigError(_var("etcdendpoints"), "no endpoints in the list")
    else:
        scheme = s.get("etcdscheme", DEFAULT_SCHEME).lower()
        addr = s.get("etcdaddr", DEFAULT_ADDR)
        if not scheme:
            raise EtcdConfigError(_var("etcdscheme"), "EtcdEndpoints and EtcdScheme both missing")
        if not addr:
            raise EtcdConfigError(_var("etcdaddr"), "EtcdEndpoints and EtcdAddr both missing")
        if scheme not in ("http", "https"):
            raise EtcdConfigError(_var("etcdscheme"), f"{scheme!r} is not http or https")
        if not _AUTHORITY.match(addr) or not 0 < int(addr.rsplit(":", 1)[1]) < 65536:
            raise EtcdConfigError(_var("etcdaddr"), f"{addr!r} is not host:port")
        endpoints = (f"{scheme}://{addr}/",)
    return EtcdConfig(endpoints=endpoints, key_file=files["etcdkeyfile"],
                      cert_file=files["etcdcertfile"], ca_file=files["etcdcafile"])


class EtcdParams(Protocol):
    """The parsed ``Etcd*`` parameters of the daemon's config object (read-only, so the
    frozen :class:`~trio_typha.config.Config` satisfies it)."""

    @property
    def etcd_endpoints(self) -> tuple[str, ...]: ...
    @property
    def etcd_scheme(self) -> str: ...
    @property
    def etcd_addr(self) -> str: ...
    @property
    def etcd_key_file(self) -> str: ...
    @property
    def etcd_cert_file(self) -> str: ...
    @property
    def etcd_ca_file(self) -> str: ...


def etcd_config_from_params(params: EtcdParams) -> EtcdConfig:
    """Build an :class:`EtcdConfig` from already-parsed parameters (same checks)."""
    return etcd_config_from_settings({
        "EtcdEndpoints": ",".join(params.etcd_endpoints),
        # An empty scheme/addr was set to "none" explicitly; keep it an error here too.
        "EtcdScheme": params.etcd_scheme or "none",
        "EtcdAddr": params.etcd_addr or "none",
        "EtcdKeyFile": params.etcd_key_file,
        "EtcdCertFile": params.etcd_cert_file,
        "EtcdCaFile": params.etcd_ca_file,
    })
