"""kubeconfig files read as client-go reads them (``clientcmd``), with PyYAML.

What the daemon needs from a kubeconfig is where the API server is and how to authenticate:
the active context's cluster (``server``, ``certificate-authority[-data]``,
``insecure-skip-tls-verify``, ``tls-server-name``, ``proxy-url``) and user (``token``,
``tokenFile``, ``client-certificate[-data]``/``client-key[-data]``, ``username``/``password``,
or an ``exec`` credential plugin).  ``auth-provider`` users are refused by name: client-go
itself dropped its in-tree providers, and ``exec`` plugins replace them.

Merging follows client-go's loading rules for a ``KUBECONFIG`` list: files that do not exist
are skipped, the first file that sets ``current-context`` decides it, and the first file that
names a cluster, user or context defines it.  Relative paths resolve against the directory of
the file they are written in; inline ``*-data`` is written to private temporary files, since
ssl loads certificates and keys only from files.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .kube_client_config import KubeClientConfig

#: How long an exec credential plugin may take (client-go sets none; a hung plugin must not
#: hang start-up or a token refresh for ever).
EXEC_TIMEOUT = 60.0


class InvalidKubeconfig(ValueError):
    """The kubeconfig cannot be used; the message says which entry and why."""


@dataclass(frozen=True, slots=True)
class _Entry:
    fields: dict[str, Any]
    base: Path  # directory of the file that defined it


def read_kubeconfig(paths: list[str], context: str | None = None, *,
                    source: str = "kubeconfig") -> KubeClientConfig:
    """The client config of ``context`` (default: the merged ``current-context``);
    ``source`` (where it came from, for messages) gets the context name appended."""
    current: str | None = None
    named: dict[str, dict[str, _Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
    read_any = False
    for path in paths:
        full = Path(os.path.expanduser(path))
        if not full.is_file():
            continue
        read_any = True
        doc = _load(full)
        if current is None and isinstance(doc.get("current-context"), str) \
                and doc["current-context"]:
            current = doc["current-context"]
        for section, singular in (("clusters", "cluster"), ("users", "user"),
                                  ("contexts", "context")):
            for item in _list(doc, section, full):
                name = item.get("name")
                if not isinstance(name, str) or not name:
                    raise InvalidKubeconfig(f"{full}: an entry of {section} has no name")
                fields = item.get(singular) or {}
                if not isinstance(fields, dict):
                    raise InvalidKubeconfig(f"{full}: {section} {name}: not a mapping")
                named[section].setdefault(name, _Entry(fields, full.parent.resolve()))
    if not read_any:
        raise InvalidKubeconfig("no such kubeconfig file")
    context = context or current
    if not context:
        raise InvalidKubeconfig("no current-context and no context given")
    ctx = _named(named, "contexts", context).fields
    cluster = _named(named, "clusters", _str(ctx, "cluster", f"context {context}"))
    user_name = ctx.get("user")
    user = _named(named, "users", user_name) if user_name else _Entry({}, cluster.base)
    return _credentials(context, cluster, user, str(user_name or ""), source)


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InvalidKubeconfig(f"{path}: {exc}") from exc
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InvalidKubeconfig(f"{path}: not a mapping")
    return doc


def _list(doc: dict[str, Any], section: str, path: Path) -> list[dict[str, Any]]:
    items = doc.get(section) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InvalidKubeconfig(f"{path}: {section} is not a list of mappings")
    return items


def _named(named: dict[str, dict[str, _Entry]], section: str, name: str) -> _Entry:
    try:
        return named[section][name]
    except KeyError:
        raise InvalidKubeconfig(f"no {section[:-1]} named {name!r}") from None


def _str(fields: dict[str, Any], key: str, where: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidKubeconfig(f"{where}: {key} is missing or not a string")
    return value


def _optional_str(fields: dict[str, Any], key: str, where: str) -> str | None:
    value = fields.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidKubeconfig(f"{where}: {key} is not a string")
    return value


def _path(entry: _Entry, key: str, where: str) -> str | None:
    value = _optional_str(entry.fields, key, where)
    return None if value is None else str(entry.base / os.path.expanduser(value))


def _data_file(entry: _Entry, key: str, where: str, suffix: str) -> str | None:
    value = _optional_str(entry.fields, key, where)
    if value is None:
        return None
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidKubeconfig(f"{where}: {key} is not base64: {exc}") from exc
    return _private_file(data, suffix)


def _private_file(data: bytes, suffix: str) -> str:
    # mkstemp makes the file readable by this user only (keys are secrets).
    fd, name = tempfile.mkstemp(prefix="trio-typha-kubeconfig-", suffix=suffix)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return name


def _credentials(context: str, cluster: _Entry, user: _Entry, user_name: str,
                 source: str) -> KubeClientConfig:
    cw, uw = f"context {context}: cluster", f"context {context}: user {user_name}"
    c, u = cluster.fields, user.fields
    insecure = c.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise InvalidKubeconfig(f"{cw}: insecure-skip-tls-verify is not true or false")
    if u.get("auth-provider"):
        provider = u["auth-provider"]
        name = provider.get("name") if isinstance(provider, dict) else provider
        raise InvalidKubeconfig(f"{uw}: auth-provider {name!r} is not supported (client-go "
                                "has dropped its in-tree providers): use an exec plugin")
    authorization: str | None = None
    token_file: str | None = None
    refresh: Callable[[], str | None] | None = None
    cert = _data_file(user, "client-certificate-data", uw, ".crt") \
        or _path(user, "client-certificate", uw)
    key = _data_file(user, "client-key-data", uw, ".key") or _path(user, "client-key", uw)
    if token := _optional_str(u, "token", uw):
        authorization = f"Bearer {token.strip()}"
    elif token_path := _path(user, "tokenFile", uw):
        token_file = os.path.normpath(token_path)
        authorization = read_token(token_file)
    elif username := _optional_str(u, "username", uw):
        password = _optional_str(u, "password", uw) or ""
        basic = base64.b64encode(f"{username}:{password}".encode()).decode()
        authorization = f"Basic {basic}"
    elif u.get("exec"):
        plugin = _ExecPlugin.parse(user, uw)
        result = plugin.run()
        authorization = result.authorization
        cert, key = result.cert_file or cert, result.key_file or key
        refresh = plugin.authorization
    return KubeClientConfig(
        server=_str(c, "server", cw).rstrip("/"),
        source=f"{source} context {context}",
        ca_file=_data_file(cluster, "certificate-authority-data", cw, ".crt")
        or _path(cluster, "certificate-authority", cw),
        cert_file=cert, key_file=key, insecure_skip_tls_verify=insecure,
        tls_server_name=_optional_str(c, "tls-server-name", cw),
        proxy=_optional_str(c, "proxy-url", cw),
        authorization=authorization, token_file=token_file, refresh_authorization=refresh)


def read_token(path: str) -> str:
    """A bearer token file's content as an ``Authorization`` header value."""
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise InvalidKubeconfig(f"token file {path}: {exc.strerror or exc}") from exc
    if not token:
        raise InvalidKubeconfig(f"token file {path} is empty")
    return f"Bearer {token}"


@dataclass(frozen=True, slots=True)
class _ExecResult:
    authorization: str | None
    cert_file: str | None
    key_file: str | None


@dataclass(frozen=True, slots=True)
class _ExecPlugin:
    """A client-go exec credential plugin (``client.authentication.k8s.io``): the command
    runs with the inherited environment plus the entry's ``env`` and
    ``KUBERNETES_EXEC_INFO``, and prints an ExecCredential whose status holds a token or a
    client certificate and key."""

    argv: tuple[str, ...]
    api_version: str
    where: str

    @classmethod
    def parse(cls, user: _Entry, where: str) -> _ExecPlugin:
        spec = user.fields["exec"]
        if not isinstance(spec, dict):
            raise InvalidKubeconfig(f"{where}: exec is not a mapping")
        command = _str(spec, "command", f"{where}: exec")
        if os.sep in command:  # client-go resolves only a command given as a path
            command = str(user.base / command)
        api_version = _str(spec, "apiVersion", f"{where}: exec")
        args = spec.get("args") or []
        variables = spec.get("env") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise InvalidKubeconfig(f"{where}: exec args is not a list of strings")
        if not isinstance(variables, list) or not all(
                isinstance(v, dict) and isinstance(v.get("name"), str)
                and isinstance(v.get("value"), str) for v in variables):
            raise InvalidKubeconfig(f"{where}: exec env is not a list of name/value pairs")
        info = json.dumps({"apiVersion": api_version, "kind": "ExecCredential",
                           "spec": {"interactive": False}})
        # env(1) adds the variables to the environment the child inherits.
        assignments = [f"{v['name']}={v['value']}" for v in variables]
        return cls(("env", "--", *assignments, f"KUBERNETES_EXEC_INFO={info}", command, *args),
                   api_version, where)

    def authorization(self) -> str | None:
        return self.run().authorization

    def run(self) -> _ExecResult:
        try:
            done = subprocess.run(self.argv, capture_output=True, text=True,
                                  timeout=EXEC_TIMEOUT, check=False, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InvalidKubeconfig(f"{self.where}: exec plugin {self.argv[-1]}: {exc}") from exc
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise InvalidKubeconfig(f"{self.where}: exec plugin exited with status "
                                    f"{done.returncode}: {tail}")
        try:
            credential = json.loads(done.stdout)
            status = credential["status"]
            if not isinstance(status, dict):
                raise TypeError("status is not a mapping")
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidKubeconfig(f"{self.where}: exec plugin printed no ExecCredential "
                                    f"status: {exc}") from exc
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not (isinstance(token, str) and token) and not (
                isinstance(cert, str) and isinstance(key, str)):
            raise InvalidKubeconfig(f"{self.where}: exec plugin's ExecCredential has neither "
                                    "a token nor a client certificate and key")
        return _ExecResult(
            authorization=f"Bearer {token.strip()}" if isinstance(token, str) and token else None,
            cert_file=_private_file(cert.encode(), ".crt") if isinstance(cert, str) else None,
            key_file=_private_file(key.encode(), ".key") if isinstance(key, str) else None)
