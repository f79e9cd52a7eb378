"""Relay tiers: a trio-typha whose caches follow another Typha (a trio-typha over its feed,
or any Typha over the gob protocol as calico-node speaks it) instead of a datastore."""
