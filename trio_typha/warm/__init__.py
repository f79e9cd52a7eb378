"""Warm start from a sibling: a starting replica takes a running sibling's state (caches,
trackers, watch resume points) over the sync port instead of listing the datastore
(``wire.py`` the records, ``serve.py`` the sibling's side, ``fetch.py`` the starting
replica's)."""
