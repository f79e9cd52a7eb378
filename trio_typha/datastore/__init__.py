"""Datastores: where resources come from (memory, Kubernetes API, etcd v3)."""
