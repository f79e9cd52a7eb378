"""gRPC's wire rules both ends share, pure: :mod:`.framing` (the 5-byte message prefix) and
:mod:`.status` (status codes, :class:`~.status.GrpcError`, grpc-message encoding). The
server (:mod:`trio_typha.protocols.grpc`) and the etcd client (:mod:`trio_typha.datastore`)
both build on them.
"""
