"""The wire protocols trio-typha speaks to its clients (Typha's gob protocol, gRPC, ...)."""
