"""The server side of a TLS connection on port 5473: ``ssl.SSLObject`` over memory BIOs.

:class:`TLSStream` is a :class:`trio.abc.Stream` like :class:`trio.SSLStream`, plus what
the broadcast round (:mod:`trio_typha.cache.fanout`) needs to write to a TLS client without
waking its task: :meth:`TLSStream.send_nowait` encrypts into the outgoing BIO and makes one
non-blocking send on the raw socket.  Encryption is per client by nature; the task wake-up,
the wait-and-retry loop and the per-write cancel scope are not.  Ciphertext the kernel does
not take stays here as the *carry*, which the next :meth:`send_all` (or :meth:`flush`, under
the caller's write timeout) sends before anything else, so the byte stream stays in order.

One writer at a time, made evident: :meth:`send_all`/:meth:`flush` raise
:class:`trio.BusyResourceError` while another is running, and :meth:`send_nowait` refuses
(``BlockingIOError``) while one is running or ciphertext is still owed (:attr:`owes`):
whoever owns the connection's broadcast seat is the only caller, and the round hands a seat
back to its writer as soon as the stream owes bytes.

A reader task may call :meth:`receive_some` while the writer sends: memory BIOs never block,
so reading and writing touch the SSL object only in short synchronous steps.  Bytes that
OpenSSL produces while *reading* (TLS 1.3 post-handshake messages such as a KeyUpdate reply)
are left in the outgoing BIO, in order, and go out with the next write of either kind; the
reader never writes.  Pings guarantee such a write within the ping interval.

SSL errors become :class:`trio.BrokenResourceError` with the :class:`ssl.SSLError` as
``__cause__`` here, at this one boundary, as with ``trio.SSLStream``, so the listener's TLS
failure classification (:mod:`.diagnosis`) reads the same errors.  The exception is
:meth:`send_nowait`, whose contract is the round's (``os.write``'s): it raises ``OSError``
(``ssl.SSLError`` is one) for a broken connection.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from typing import Any

import trio

#: Ciphertext read from the socket per receive (a TLS record is at most ~16 KiB).
RECEIVE_SIZE = 64 * 1024
#: Plaintext encrypted per step of :meth:`TLSStream.send_all`: bounds the ciphertext held.
ENCRYPT_PIECE = 256 * 1024


class TLSStream(trio.abc.Stream):
    """Server-side TLS over ``transport`` with a synchronous :meth:`send_nowait`."""

    def __init__(self, transport: trio.SocketStream, context: ssl.SSLContext) -> None:
        self.transport = transport
        self._socket = transport.socket
        self._fd = transport.socket.fileno()
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        #: Ciphertext taken from the outgoing BIO that the socket has not taken yet.
        self._carry: memoryview | None = None
        self._sending = False  # a send_all / flush is running
        self._receiving = False
        self._handshake_done = False
        self._broken = False
        self._closed = False

    # ---- what the listener and the sessions read

    @property
    def context(self) -> ssl.SSLContext:
        return self._ssl.context

    @context.setter
    def context(self, context: ssl.SSLContext) -> None:
        # The listener swaps the handshake context (with certificate capture) for one
        # without, once the handshake is done.
        self._ssl.context = context

    def getpeercert(self) -> dict[str, Any] | None:
        return self._ssl.getpeercert()

    def selected_alpn_protocol(self) -> str | None:
        return self._ssl.selected_alpn_protocol()

    @property
    def owes(self) -> bool:
        """Ciphertext the socket did not take is waiting: the writer must send it first.

        (What the SSL object wrote to the outgoing BIO while reading is not owed to anyone
        yet: any next write, :meth:`send_nowait` included, sends it before its own bytes.)
        """
        return self._carry is not None

    # ---- handshake

    async def do_handshake(self) -> None:
        """The server's half of the handshake; BrokenResourceError if it fails."""
        self._check_open()
        while True:
            try:
                self._ssl.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            except ssl.SSLError as exc:
                self._send_alert_nowait()
                self._broken = True
                raise trio.BrokenResourceError(exc) from exc
            # The server's flights; once done, TLS 1.3 session tickets too.
            await self._flush()
            if done:
                self._handshake_done = True
                return
            data = await self._receive_ciphertext()
            if not data:
                self._incoming.write_eof()

    # ---- reading

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._receiving:
            raise trio.BusyResourceError("another task is already receiving")
        self._receiving = True
        try:
            self._check_open()
            size = max_bytes or RECEIVE_SIZE
            received = False
            while True:
                try:
                    data = self._ssl.read(size)
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    return b""  # close_notify: a clean end of the stream
                except ssl.SSLError as exc:
                    self._send_alert_nowait()  # the alert OpenSSL wrote for the bad record
                    self._broken = True
                    raise trio.BrokenResourceError(exc) from exc
                else:
                    if not received:
                        await trio.lowlevel.checkpoint()  # receive_some is a checkpoint
                    return data
                received = True
                if not await self._receive_ciphertext():
                    # EOF without close_notify: the read raises SSLEOFError next (broken).
                    self._incoming.write_eof()
        finally:
            self._receiving = False

    async def _receive_ciphertext(self) -> bytes:
        try:
            data = await self._socket.recv(RECEIVE_SIZE)
        except OSError as exc:
            self._broken = True
            raise trio.BrokenResourceError(exc) from exc
        if data:
            self._incoming.write(data)
        return data

    # ---- writing

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data`` after whatever is owed; ``send_all(b"")`` sends just what is owed."""
        if self._sending:
            raise trio.BusyResourceError("another task is already sending")
        self._sending = True
        try:
            self._check_open()
            view = memoryview(data)
            sent = False
            for start in range(0, len(view), ENCRYPT_PIECE):
                self._encrypt(view[start:start + ENCRYPT_PIECE])
                sent = await self._flush() or sent
            if not view:
                sent = await self._flush()
            if not sent:
                await trio.lowlevel.checkpoint()  # send_all is a checkpoint
        finally:
            self._sending = False

    async def flush(self) -> None:
        """Send what is owed (the carry first); the caller bounds it with its write timeout."""
        await self.send_all(b"")

    async def wait_send_all_might_not_block(self) -> None:
        self._check_open()
        if self.owes:
            await self._socket.wait_writable()
        else:
            await trio.lowlevel.checkpoint()

    def send_nowait(self, data: bytes | memoryview) -> int:
        """The broadcast round's write: encrypt ``data`` and make one non-blocking send.

        Returns ``len(data)``: the plaintext is always taken.  Ciphertext the kernel does not
        take is carried (:attr:`owes`) for the writer's next :meth:`send_all`/:meth:`flush`.
        Raises ``OSError`` if the connection is broken, and BlockingIOError (an OSError the
        round takes as "would block") if another writer holds the stream or bytes are still
        owed (the seat owner's bug, which must not end the round).
        """
        if self._sending or self._carry is not None:
            # The seat owner's bug, but the round's contract: BlockingIOError hands the
            # seat back to its writer, which sends what is owed before these bytes.
            raise BlockingIOError("send_nowait while the writer owns the stream")
        if self._closed or self._broken:
            raise BrokenPipeError("TLS stream is closed or broken")
        self._encrypt(data, mark_broken=False)
        out = self._outgoing.read()
        try:
            sent = os.write(self._fd, out)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._broken = True
            raise
        if sent < len(out):
            self._carry = memoryview(out)[sent:]
        return len(data)

    def _encrypt(self, data: bytes | memoryview, *, mark_broken: bool = True) -> None:
        try:
            # A memory BIO never blocks, so the SSL object takes the whole buffer.
            self._ssl.write(data)
        except ssl.SSLError as exc:
            self._broken = True
            if not mark_broken:
                raise
            raise trio.BrokenResourceError(exc) from exc

    async def _flush(self) -> bool:
        """Send the carry, then the outgoing BIO, until both are empty; False: nothing to."""
        sent_any = False
        while True:
            if self._carry is None:
                pending = self._outgoing.read()
                if not pending:
                    return sent_any
                self._carry = memoryview(pending)
            sent_any = True
            try:
                sent = await self._socket.send(self._carry)
            except OSError as exc:
                self._broken = True
                raise trio.BrokenResourceError(exc) from exc
            # Cancelled before the send: nothing was sent and the carry is intact.
            rest = self._carry[sent:]
            self._carry = rest if len(rest) else None

    # ---- closing

    async def aclose(self) -> None:
        """Send close_notify if that can be done now without blocking, then close.

        A writer still holding the stream (or ciphertext still owed) means close_notify
        cannot go out in order: the connection is then closed without it.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        if self._handshake_done and not self._broken and not self._sending and not self.owes:
            # SSLWantReadError: close_notify is written; we do not wait for the peer's.
            with contextlib.suppress(ssl.SSLError):
                self._ssl.unwrap()
            self._send_alert_nowait()
        await self.transport.aclose()

    def _send_alert_nowait(self) -> None:
        """Best effort, one non-blocking send of what the SSL object wrote (an alert,
        close_notify) on a connection that is ending anyway."""
        out = self._outgoing.read()
        if out:
            with contextlib.suppress(OSError):
                os.write(self._fd, out)

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("TLS stream is closed")
        if self._broken:
            raise trio.BrokenResourceError("TLS stream is broken")
