"""The snapshot cache: :mod:`.core` (pure: KV map plus a chain of sequence-numbered
breadcrumbs), :mod:`.build` (snapshot materialization) and :mod:`.feed` (its trio shell).

Nothing is re-exported here, so importing the pure core never imports trio.
"""
