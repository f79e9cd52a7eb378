"""Following another trio-typha process's caches: the feed's records (``wire.py``), the
follower's side, an upstream feed as a datastore of its own (``follow.py``), and the side
that serves the feed (``serve.py``)."""
