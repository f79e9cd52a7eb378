"""TLS for both ends: the server's contexts from files, its stream with the broadcast round's
non-blocking send, the clients' handshake, and the diagnosis of failures both log."""
