"""The test bed: real-protocol stand-ins for what trio-typha talks to (Kubernetes API server,
client fleets, churn generators), used by the integration tests, benchmarks and the demo."""
