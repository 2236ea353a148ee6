"""Turns per table (``metastore.iceberg.turns``): one holder per table, in arrival order,
and nothing kept once nobody holds or waits for a table's turn."""

from __future__ import annotations

import asyncio
import contextlib

from metastore.iceberg.turns import Turns


def test_one_holder_per_table_in_arrival_order() -> None:
    async def scenario() -> tuple[list[str], int, int]:
        turns = Turns()
        order: list[str] = []
        holding: set[str] = set()
        release = asyncio.Event()
        both_in = asyncio.Event()  # a1 and b1 hold their tables' turns

        async def commit(name: str, table: str) -> None:
            async with turns.turn(table):
                assert table not in holding, "two holders of one table's turn"
                holding.add(table)
                order.append(name)
                if order == ["a1", "b1"]:
                    both_in.set()
                if name == "a1":
                    await release.wait()  # a2 and a3 wait behind it; b1 does not
                holding.discard(table)

        tasks = [asyncio.create_task(commit(n, n[0])) for n in ("a1", "a2", "b1", "a3")]
        await both_in.wait()
        waiting = len(turns)
        release.set()
        await asyncio.gather(*tasks)
        return order, waiting, len(turns)

    order, waiting, left = asyncio.run(scenario())
    assert order == ["a1", "b1", "a2", "a3"]
    assert waiting == 1  # table a: a1 holds, a2 and a3 wait; b finished
    assert left == 0


def test_a_failed_holder_passes_the_turn_on() -> None:
    async def scenario() -> int:
        turns = Turns()

        async def fails() -> None:
            async with turns.turn("t"):
                raise RuntimeError("lost")

        with contextlib.suppress(RuntimeError):
            await fails()
        async with turns.turn("t"):
            pass
        return len(turns)

    assert asyncio.run(scenario()) == 0


def test_busy_while_held_or_awaited() -> None:
    async def scenario() -> list[bool]:
        turns = Turns()
        seen = [turns.busy("t")]
        async with turns.turn("t"):
            seen += [turns.busy("t"), turns.busy("u")]
        return [*seen, turns.busy("t")]

    assert asyncio.run(scenario()) == [False, True, False, False]
