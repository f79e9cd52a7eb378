"""The port-5473 listener and its limits: protocol sniffing, the connection limit and its
rebalancing, the file descriptor limit, and the live feed of its connections."""
