"""Health, metrics and introspection."""
