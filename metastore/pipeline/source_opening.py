"""The source a job's options name, opened on the driver.

``--url``: the node takes a checkpoint of its database (an embedded node's store,
a cluster node's view: the same key layout) and the job reads it read-only, then
asks the node to delete it. The checkpoint is a directory on the node's machine, so
the job runs there (or on a Spark cluster that mounts the node's data directory at
the same path). ``--data-dir``: a store no node has open, or a checkpoint.
``--kafka``: the changelog topics (``cluster``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from metastore.pipeline.embedded_source import EmbeddedSource
from metastore.pipeline.exits import JobError
from metastore.pipeline.node_client import NodeClient
from metastore.pipeline.options import JobOptions
from metastore.pipeline.source import Source


def open_source(options: JobOptions, node: NodeClient | None) -> Source:
    if options.source == "data-dir":
        return EmbeddedSource(Path(options.where))
    if options.source == "url":
        assert node is not None
        return from_node(node)
    from metastore.pipeline.cluster_source import ClusterSource

    return ClusterSource.of(options)


def from_node(node: NodeClient) -> EmbeddedSource:
    checkpoint = node.create_checkpoint()
    checkpoint_id, path = checkpoint["id"], Path(checkpoint["path"])

    def delete() -> None:
        with contextlib.suppress(JobError):  # the node expires it anyway
            node.delete_checkpoint(checkpoint_id)

    if not path.is_dir():
        delete()
        raise JobError(
            f"the node's checkpoint {path} is not on this machine: run the job where the "
            "node's data directory is (or on a Spark cluster that mounts it at that path)"
        )
    try:
        return EmbeddedSource(path, on_close=delete)
    except BaseException:
        delete()
        raise
