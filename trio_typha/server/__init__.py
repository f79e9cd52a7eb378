"""The listener on port 5473 and what every protocol session shares."""
