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
from metastore.util.retry import RetryPolicy

log = logging.getLogger(__name__)

Step = Callable[[], Awaitable[None]]

# until the owner (possibly a node still starting) has written: no deadline
RETRY = RetryPolicy(base_s=0.1, max_s=2.0)


async def until_done(step: Step, what: str, pending: set[str], policy: RetryPolicy = RETRY) -> None:
    attempts = policy.start()
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
        if not await attempts.abackoff():
            raise ServiceUnavailable(f"bootstrap: {what} did not succeed in time")


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
