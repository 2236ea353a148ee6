"""HTTP API tests against real nodes."""
