"""Cluster mode on Kafka (KLIP-18): changelog topics, views on every node, partition owners."""
