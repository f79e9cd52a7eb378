"""Calico's data model: what each syncer serves, as serialized keys and values (pure code)."""
