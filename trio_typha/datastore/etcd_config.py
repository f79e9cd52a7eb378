"""Where etcd is and how to authenticate to it: an :class:`EtcdConfig`.

In etcd mode Typha reads only its own parameters (not the generic ``ETCD_*`` variables):
``EtcdEndpoints`` or else ``EtcdScheme`` + ``EtcdAddr``, and the client TLS files
``EtcdKeyFile``, ``EtcdCertFile``, ``EtcdCaFile`` (typha/pkg/config/config_params.go,
DatastoreConfig).  :mod:`trio_typha.config` parses and checks them; :meth:`EtcdConfig.
from_config` takes the parsed values as they are.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from ..config import Config

DEFAULT_ENDPOINTS = Config().etcd_urls


@dataclass(frozen=True, slots=True)
class EtcdConfig:
    """Where etcd is and how to authenticate to it."""

    endpoints: tuple[str, ...] = DEFAULT_ENDPOINTS
    key_file: str = ""
    cert_file: str = ""
    ca_file: str = ""

    @classmethod
    def from_config(cls, cfg: Config) -> EtcdConfig:
        return cls(endpoints=cfg.etcd_urls, key_file=cfg.etcd_key_file,
                   cert_file=cfg.etcd_cert_file, ca_file=cfg.etcd_ca_file)

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context for ``https`` endpoints (CA file, else the system CAs)."""
        ctx = ssl.create_default_context(cafile=self.ca_file or None)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file or None)
        return ctx
