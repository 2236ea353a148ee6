"""Kafka-backed, event-sourced catalog metastore."""

__version__ = "0.1.0"
