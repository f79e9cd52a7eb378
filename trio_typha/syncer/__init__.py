"""Syncer pipelines: datastore events → conversion → validation → snapshot cache."""
