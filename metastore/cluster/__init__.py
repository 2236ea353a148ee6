"""Cluster mode on Kafka: changelog topics, views on every node, partition owners."""
