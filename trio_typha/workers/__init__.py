"""ServerWorkers: the worker processes, the primary's feed to them and the sockets it passes them."""
