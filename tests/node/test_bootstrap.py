"""Bootstrap steps in cluster mode (metastore/node/bootstrap.py): retried while the owner
of their partition (maybe a node still starting) has not written, stopped by anything
else. The steps run on the real event loop with a short retry policy."""

from __future__ import annotations

import pytest

from metastore.errors import BadRequest, MetastoreError, NoSuchTenant, NotOwner, ServiceUnavailable
from metastore.node.bootstrap import until_done
from metastore.util.retry import RetryPolicy

QUICK = RetryPolicy(base_s=0.001, max_s=0.002)


class Step:
    def __init__(self, *failures: MetastoreError) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)


async def test_a_step_is_retried_until_the_owner_has_written() -> None:
    step = Step(NotOwner("owned elsewhere", 0), NoSuchTenant("not yet"), ServiceUnavailable("busy"))
    pending = {"default tenant"}
    await until_done(step, "default tenant", pending, QUICK)
    assert step.calls == 4
    assert pending == set()


async def test_any_other_error_stops_the_step() -> None:
    step = Step(NotOwner("owned elsewhere", 0), BadRequest("a bug"))
    pending = {"token key"}
    with pytest.raises(BadRequest):
        await until_done(step, "token key", pending, QUICK)
    assert step.calls == 2
    assert pending == {"token key"}  # the node stays not ready


async def test_a_bounded_policy_gives_up() -> None:
    step = Step(*(NotOwner("owned elsewhere", 0) for _ in range(10)))
    pending = {"token key"}
    bounded = RetryPolicy(base_s=0.001, max_s=0.002, max_attempts=3)
    with pytest.raises(ServiceUnavailable, match="token key did not succeed"):
        await until_done(step, "token key", pending, bounded)
    assert step.calls == 3
    assert pending == {"token key"}
