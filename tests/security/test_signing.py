"""The key ring: rotation keeps earlier keys until no token they signed can be unexpired."""

from __future__ import annotations

from metastore.security.signing import KEEP_RETIRED_S, KeyRing


def test_a_rotation_retires_the_current_key_and_keeps_it_for_its_tokens() -> None:
    first = KeyRing.new()
    second, dropped = first.rotated(now=1_000)
    assert dropped == ()
    assert second.current != first.current
    assert second.keys[first.current] == first.keys[first.current]
    assert second.retired == {first.current: 1_000}
    assert KeyRing.of(second.properties()) == second


def test_keys_retired_longer_than_any_token_lives_are_dropped_at_the_next_rotation() -> None:
    first = KeyRing.new()
    second, _ = first.rotated(now=1_000)
    third, dropped = second.rotated(now=1_000 + KEEP_RETIRED_S)  # just at the edge: kept
    assert dropped == () and first.current in third.keys
    fourth, dropped = third.rotated(now=1_001 + KEEP_RETIRED_S)
    assert dropped == (f"key:{first.current}", f"retired:{first.current}")
    assert first.current not in fourth.keys and first.current not in fourth.retired
    assert set(fourth.keys) == {second.current, third.current, fourth.current}
