"""The bounded LRU map behind the node's small caches of immutable derived values."""

from __future__ import annotations

import pytest

from metastore.util.lru import Lru


def test_the_least_recently_used_entry_goes_first() -> None:
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "b" is now the oldest
    lru.put("c", 3)
    assert (lru.get("a"), lru.get("b"), lru.get("c"), len(lru)) == (1, None, 3, 2)


def test_the_first_value_put_for_a_key_is_the_one_kept() -> None:
    lru: Lru[str, object] = Lru(4)
    first, second = object(), object()
    assert lru.put("k", first) is first
    assert lru.put("k", second) is first


def test_an_lru_holds_at_least_one_entry() -> None:
    with pytest.raises(ValueError):
        Lru(0)
