"""PyIceberg's own integration tests, run against a node of ours.

``source`` fetches the tests from PyIceberg's source distribution at the pinned
version (downloaded once, checked against a pinned SHA-256, cached under
``.cache/``); ``plugin`` is the fixture adapter pytest loads into their session
(a node on a free port instead of their docker compose, and skips for what needs
Spark, Hive or Ray); ``python -m harness.pyiceberg_it`` runs the two together.
Nothing of PyIceberg's test code is kept in this repository.
"""
