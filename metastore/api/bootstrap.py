"""System records a fresh deployment needs (default tenant and catalog, token key).

Embedded mode writes them before serving. In cluster mode only the owner of their
partition can write them, and it may be another node that is still starting, so
every node runs the same idempotent steps in the background until they succeed:
the owner's attempt writes, the others find the records in their view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from metastore.errors import NoSuchTenant, NotOwner, ServiceUnavailable

log = logging.getLogger(__name__)

Step = Callable[[], Awaitable[None]]


async def until_done(step: Step, what: str, pending: set[str]) -> None:
    delay = 0.1
    while True:
        try:
            await step()
            log.info("bootstrap: %s done", what)
            pending.discard(what)
            return
        except (NotOwner, NoSuchTenant) as exc:  # the owner (elsewhere) has not written yet
            log.debug("bootstrap: %s waits: %s", what, exc.message)
        except ServiceUnavailable as exc:
            log.info("bootstrap: %s waits: %s", what, exc.message)
        await asyncio.sleep(delay)
        delay = min(2.0, delay * 2)


@contextlib.asynccontextmanager
async def bootstrapping(
    step: Step, what: str, *, background: bool, pending: set[str]
) -> AsyncIterator[None]:
    """Run ``step`` now (embedded) or in a background task for the block (cluster);
    ``what`` stays in ``pending`` until it is done (the node is not ready before)."""
    if not background:
        await step()
        yield
        return
    pending.add(what)
    task = asyncio.create_task(until_done(step, what, pending))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
