"""Name the acceptable CAs in the server's CertificateRequest (as Go's TLS server does).

Python's ``ssl`` module trusts a CA bundle for verification but has no call for
``SSL_CTX_set_client_CA_list``, so OpenSSL would send an empty ``certificate_authorities``
list and a client holding several certificates could not tell which one to present.  This
calls OpenSSL directly (``ctypes``, the libssl the ``_ssl`` module is linked against) with
the names from the CA file.  When that is not possible (another libssl, another Python
build) it logs once and the handshake goes on without the hint.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import ssl
import sys

log = logging.getLogger(__name__)

def _ssl_ctx_pointer(ctx: ssl.SSLContext) -> int:
    # CPython's PySSLContext starts with PyObject_HEAD, then the SSL_CTX pointer.
    head = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
    return ctypes.c_void_p.from_address(id(ctx) + head).value or 0


class ClientCAList:
    """Names the acceptable CAs in a server context's CertificateRequest.

    libssl is looked up on first use and kept by this object (its owner is the server's
    :class:`~.server.ServerTLS`, which builds every server context); when it cannot be
    used, that is logged once and :meth:`send` says False from then on.
    """

    def __init__(self) -> None:
        self._libssl: ctypes.CDLL | None = None
        self._unavailable = ""

    def _load(self) -> ctypes.CDLL | None:
        if self._libssl is not None or self._unavailable:
            return self._libssl
        # The same soname as the running OpenSSL: dlopen hands back the loaded library.
        major = ssl.OPENSSL_VERSION_INFO[0]
        name = f"libssl.so.{major}" if major >= 3 else ctypes.util.find_library("ssl")
        try:
            lib = ctypes.CDLL(name or "libssl.so")
            lib.SSL_load_client_CA_file.restype = ctypes.c_void_p
            lib.SSL_load_client_CA_file.argtypes = [ctypes.c_char_p]
            lib.SSL_CTX_set_client_CA_list.restype = None
            lib.SSL_CTX_set_client_CA_list.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        except (OSError, AttributeError) as exc:
            self._unavailable = str(exc)
            log.info("Cannot name the acceptable CAs in CertificateRequest: %s", exc)
            return None
        self._libssl = lib
        return lib

    def send(self, ctx: ssl.SSLContext, ca_file: str) -> bool:
        """Put the subject names of ``ca_file``'s certificates in ``ctx``'s
        CertificateRequest."""
        if sys.implementation.name != "cpython":
            return False
        lib = self._load()
        if lib is None:
            return False
        names = lib.SSL_load_client_CA_file(ca_file.encode())
        if not names:
            return False
        pointer = _ssl_ctx_pointer(ctx)
        if not pointer:
            return False
        lib.SSL_CTX_set_client_CA_list(pointer, names)  # takes ownership of the list
        return True
