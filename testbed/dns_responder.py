"""A small authoritative DNS responder on loopback UDP, for SRV discovery in tests and demos.

It answers from a zone that the caller edits in place (``responder.zone``): names mapped to
records.  An SRV answer carries the targets' A/AAAA records in its additional section, as
Kubernetes DNS does for a headless Service.  Malformed queries are dropped (counted in
``dropped``), unknown names get NXDOMAIN.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from trio_typha.client import dns
from trio_typha.client.discovery import TyphaAddress, srv_name

log = logging.getLogger(__name__)


class DnsResponder:
    def __init__(self) -> None:
        self.zone: dict[str, list[dns.Record]] = {}
        self.host = "127.0.0.1"
        self.port = 0
        self.queries = 0
        self.dropped = 0
        #: Put the SRV targets' addresses in the additional section (as Kubernetes DNS does).
        self.additional_records = True

    @property
    def server(self) -> tuple[str, int]:
        return self.host, self.port

    def set_typha_service(self, addresses: Iterable[TyphaAddress], *, service: str,
                          namespace: str, zone: str = "cluster.local", ttl: int = 5) -> str:
        """Publish one SRV record per Typha (headless-Service style); returns the SRV name."""
        name = srv_name(service, namespace, zone=zone)
        srvs, hosts = [], []
        for i, a in enumerate(addresses):
            target = f"typha-{i}.{service}.{namespace}.svc.{zone}"
            srvs.append(dns.Record(name, dns.TYPE_SRV, ttl, dns.Srv(0, 10, a.port, target)))
            rtype = dns.TYPE_AAAA if ":" in a.host else dns.TYPE_A
            hosts.append(dns.Record(target, rtype, ttl, a.host))
        for host in hosts:
            self.zone[host.name] = [host]
        self.zone[name] = srvs
        return name

    def answer(self, packet: bytes) -> bytes | None:
        """The reply to one query packet (pure), or None to drop it."""
        try:
            query = dns.decode_message(packet)
        except dns.DnsFormatError:
            self.dropped += 1
            return None
        if query.response or len(query.questions) != 1:
            self.dropped += 1
            return None
        self.queries += 1
        qname, qtype = query.questions[0]
        records = self.zone.get(qname.lower().rstrip("."))
        if records is None:
            return dns.encode_response(query, [], rcode=dns.RCODE_NXDOMAIN)
        answers = [r for r in records if r.rtype == qtype]
        extra = [a for r in answers if isinstance(r.data, dns.Srv) and self.additional_records
                 for a in self.zone.get(r.data.target.lower(), ())]
        return dns.encode_response(query, answers, extra)

    async def serve(self, host: str = "127.0.0.1", port: int = 0, *,
                    task_status: trio.TaskStatus[DnsResponder] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        family = trio.socket.AF_INET6 if ":" in host else trio.socket.AF_INET
        with trio.socket.socket(family, trio.socket.SOCK_DGRAM) as sock:
            await sock.bind((host, port))
            self.host, self.port = host, sock.getsockname()[1]
            task_status.started(self)
            while True:
                packet, peer = await sock.recvfrom(65535)
                reply = self.answer(packet)
                if reply is not None:
                    try:
                        await sock.sendto(reply, peer)
                    except OSError as exc:  # a vanished client must not stop the responder
                        log.debug("dns responder: reply to %s failed: %s", peer, exc)
