"""Single-writer partition owners of the cluster mode (KLIP-18)."""
