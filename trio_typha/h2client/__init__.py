"""An HTTP/2 client on h2 and trio, for the datastores' long-lived connections.

:mod:`.core` is the sans-IO connection (streams, flow control, GOAWAY, keepalive PING
bookkeeping); :mod:`.shell` is the trio connection task around it and its stream objects.
Nothing is re-exported here, so importing the pure core never imports trio.
"""
