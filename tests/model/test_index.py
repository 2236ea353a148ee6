"""The spillable commit index: serialization, reads over stripes, and many spill rounds."""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from metastore.model.codec import default_codec
from metastore.model.index import (
    Entry,
    IndexLimits,
    IndexUpdate,
    IndexValue,
    IndexView,
    StripeRef,
    decode_entries,
    encode_entries,
    entries_size,
)
from metastore.model.records import stripe_decode, stripe_encode

BIG_ID = (1 << 52) + 12345  # snowflake-sized: 8-byte varints


def avro_size(entries: Sequence[Entry]) -> int:
    return len(default_codec().encode("index", encode_entries(entries)))


@dataclass
class Stripes:
    """A dict-backed stripe store with an id counter (what commits write to persistence)."""

    data: dict[int, list[Entry]] = field(default_factory=dict)
    counter: int = 1000

    def new_id(self) -> int:
        self.counter += 1
        return self.counter

    def load(self, obj_id: int) -> Sequence[Entry]:
        return self.data[obj_id]

    def put(self, obj_id: int, entries: list[Entry]) -> None:
        assert obj_id not in self.data, f"stripe id {obj_id} written twice"
        self.data[obj_id] = entries


# --- serialization -------------------------------------------------------------------


def test_encode_shares_prefixes_and_round_trips() -> None:
    entries: list[Entry] = [
        (b"abcdef", ("entity", 1)),
        (b"abcxyz", ("entity", 2)),
        (b"abd", None),
        (b"b", ("commit", BIG_ID)),
        (b"b\x00", ("entity", 3)),
    ]
    record = encode_entries(entries)
    assert [e["shared"] for e in record["entries"]] == [0, 3, 2, 0, 1]
    assert [e["suffix"] for e in record["entries"]] == [b"abcdef", b"xyz", b"d", b"b", b"\x00"]
    assert record["types"] == ["entity", "commit"]
    assert [e["type"] for e in record["entries"]] == [0, 0, -1, 1, 0]
    assert decode_entries(record) == entries
    data = default_codec().encode("index", record)
    assert decode_entries(default_codec().decode("index", data)) == entries


def test_prefix_compression_makes_long_common_prefixes_cheap() -> None:
    prefix = b"warehouse\x1fsales\x1fregion_emea\x1fdaily_rollups\x00t"
    entries: list[Entry] = [
        (prefix + f"orders_{i:06d}".encode(), ("entity", BIG_ID + i)) for i in range(1000)
    ]
    record = encode_entries(entries)
    shared = [e["shared"] for e in record["entries"]]
    assert shared[0] == 0
    assert min(shared[1:]) >= len(prefix) + len(b"orders_000")
    raw_keys = sum(len(k) for k, _ in entries)
    encoded = avro_size(entries)
    # ~2 suffix bytes + 8-byte id + 4 bytes of framing per entry vs ~56-byte raw keys.
    assert encoded < raw_keys / 3
    assert decode_entries(default_codec().decode("index", default_codec().encode("index", record)))


def _shapes() -> dict[str, list[Entry]]:
    rng = random.Random(7)
    random_keys = {
        bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))): (
            "entity",
            rng.getrandbits(62),
        )
        for _ in range(500)
    }
    prefix = b"db\x1fsales\x00t"
    return {
        "one entry": [(b"a\x00tfoo", ("entity", BIG_ID))],
        "ten snowflake ids": [(b"ns\x00t%d" % i, ("entity", BIG_ID + i)) for i in range(10)],
        "long common prefix": [
            (prefix + b"orders_%06d" % i, ("entity", BIG_ID + i)) for i in range(3000)
        ],
        "random keys": sorted(random_keys.items()),
        "half tombstones": [(b"k%05d" % i, None if i % 2 else ("entity", i)) for i in range(1000)],
        "many types, small ids": [(b"k%05d" % i, (f"type{i % 7}", i)) for i in range(300)],
        "long keys": [(bytes([i]) * 300, ("entity", BIG_ID)) for i in range(1, 100)],
    }


@pytest.mark.parametrize("shape", list(_shapes()))
def test_entries_size_estimates_the_avro_size(shape: str) -> None:
    entries = _shapes()[shape]
    real = avro_size(entries)
    estimate = entries_size(entries)
    assert abs(estimate - real) <= real * 0.10, (estimate, real)


# --- reading -------------------------------------------------------------------------


def _view(embedded: list[Entry], stripes: list[list[Entry]]) -> tuple[IndexView, Stripes]:
    store = Stripes()
    refs = []
    for entries in stripes:
        obj_id = store.new_id()
        store.put(obj_id, entries)
        refs.append(StripeRef(entries[0][0], entries[-1][0], obj_id))
    return IndexView(embedded, refs, store.load), store


def v(n: int) -> IndexValue:
    return ("entity", n)


def test_view_reads_embedded_over_stripes() -> None:
    view, _ = _view(
        [(b"b2", v(22)), (b"d", v(4))],
        [[(b"a1", v(1)), (b"a2", v(2))], [(b"c1", v(31)), (b"c3", v(33))]],
    )
    assert view.get(b"a1") == v(1)
    assert view.get(b"c3") == v(33)
    assert view.get(b"b2") == v(22)
    assert view.get(b"d") == v(4)
    for missing in (b"", b"a", b"a3", b"b", b"c2", b"c4", b"e"):
        assert view.get(missing) is None, missing
    assert list(view.items()) == [
        (b"a1", v(1)),
        (b"a2", v(2)),
        (b"b2", v(22)),
        (b"c1", v(31)),
        (b"c3", v(33)),
        (b"d", v(4)),
    ]
    assert [k for k, _ in view.items(b"c")] == [b"c1", b"c3"]
    assert [k for k, _ in view.items(start_after=b"a2")] == [b"b2", b"c1", b"c3", b"d"]
    assert [k for k, _ in view.items(start_after=b"b")] == [b"b2", b"c1", b"c3", b"d"]
    assert [k for k, _ in view.items(b"c", start_after=b"c1")] == [b"c3"]
    assert [k for k, _ in view.items(b"c", start_after=b"a")] == [b"c1", b"c3"]
    assert list(view.items(b"c", start_after=b"c3")) == []
    assert list(view.items(b"z")) == []


def test_embedded_entries_take_precedence_over_spilled_ones() -> None:
    view, _ = _view(
        [(b"a2", v(200)), (b"c1", v(300))],
        [[(b"a1", v(1)), (b"a2", v(2))], [(b"c1", v(31)), (b"c3", v(33))]],
    )
    assert view.get(b"a2") == v(200)
    assert view.get(b"c1") == v(300)
    assert list(view.items()) == [
        (b"a1", v(1)),
        (b"a2", v(200)),
        (b"c1", v(300)),
        (b"c3", v(33)),
    ]
    assert list(view.items(b"c")) == [(b"c1", v(300)), (b"c3", v(33))]
    assert list(view.items(start_after=b"a1")) == [
        (b"a2", v(200)),
        (b"c1", v(300)),
        (b"c3", v(33)),
    ]


def test_tombstones_hide_spilled_keys() -> None:
    view, _ = _view(
        [(b"a1", None), (b"c3", None), (b"zz", None)],
        [[(b"a1", v(1)), (b"a2", v(2))], [(b"c1", v(31)), (b"c3", v(33))]],
    )
    assert view.get(b"a1") is None
    assert view.get(b"c3") is None
    assert view.get(b"zz") is None
    assert view.get(b"a2") == v(2)
    assert list(view.items()) == [(b"a2", v(2)), (b"c1", v(31))]
    assert list(view.items(b"c")) == [(b"c1", v(31))]
    assert list(view.items(b"a", start_after=b"a0")) == [(b"a2", v(2))]


@pytest.mark.parametrize("seed", range(20))
def test_reads_over_embedded_stripes_and_changes_match_a_dict_model(seed: int) -> None:
    """Every read (prefix, start_after, stop) over embedded entries and tombstones on top
    of stripes, with a commit's changes on top of that, is what the merged dict gives."""
    rng = random.Random(seed)
    keys = sorted({bytes(rng.choice(b"abc") for _ in range(rng.randint(1, 3))) for _ in range(60)})
    spilled = sorted(rng.sample(keys, rng.randint(0, len(keys))))
    stripes = [
        [(k, v(i)) for i, k in enumerate(spilled[at : at + 5], start=at)]
        for at in range(0, len(spilled), 5)
    ]
    embedded: list[Entry] = [
        (k, None if rng.random() < 0.3 else v(1000 + i))
        for i, k in enumerate(sorted(rng.sample(keys, rng.randint(0, 12))))
    ]
    view, store = _view(embedded, stripes)
    model: dict[bytes, IndexValue | None] = {k: e for stripe in stripes for k, e in stripe}
    model.update(dict(embedded))
    update = IndexUpdate(view, store.load)
    changed = dict(model)
    for k in rng.sample(keys, rng.randint(0, 10)):
        if rng.random() < 0.4:
            update.remove(k)
            changed[k] = None
        else:
            update.put(k, v(5000 + len(changed)))
            changed[k] = update.get(k)

    def expected(
        of: dict[bytes, IndexValue | None], prefix: bytes, after: bytes | None, stop: bytes | None
    ) -> list[tuple[bytes, IndexValue]]:
        return [
            (k, value)
            for k, value in sorted(of.items())
            if value is not None
            and k.startswith(prefix)
            and (after is None or k > after)
            and (stop is None or k < stop)
        ]

    probes = [b"", b"a", b"b", b"ab", b"ca", b"ccc", b"d"]
    for prefix in probes:
        for after in (None, *probes):
            assert list(update.items(prefix, after)) == expected(changed, prefix, after, None)
            for stop in (None, *probes):
                got = list(view.items(prefix, after, stop))
                assert got == expected(model, prefix, after, stop), (prefix, after, stop)


def test_update_reads_its_own_changes_before_build() -> None:
    base, store = _view([(b"b", v(2))], [[(b"a", v(1)), (b"c", v(3))]])
    update = IndexUpdate(base, store.load)
    update.put(b"bb", v(22))
    update.remove(b"a")
    update.remove(b"b")
    update.put(b"c", v(33))
    assert update.get(b"a") is None
    assert update.get(b"b") is None
    assert update.get(b"c") == v(33)
    assert update.get(b"bb") == v(22)
    assert list(update.items()) == [(b"bb", v(22)), (b"c", v(33))]
    assert list(update.items(start_after=b"bb")) == [(b"c", v(33))]
    assert sorted(update.changed_keys) == [b"a", b"b", b"bb", b"c"]


def test_build_without_spill_keeps_stripes_and_tombstones() -> None:
    base, store = _view([], [[(b"a", v(1)), (b"c", v(3))]])
    update = IndexUpdate(base, store.load)
    update.remove(b"a")
    update.put(b"b", v(2))
    built = update.build(IndexLimits(), store.new_id)
    assert built.new_stripes == []
    assert built.stripes == list(base.stripes)
    assert list(built.embedded) == [(b"a", None), (b"b", v(2))]


# --- many commits with tiny limits against a dict model ------------------------------

LIMITS = IndexLimits(embedded_max=512, stripe_max=1024)
MAIN_PREFIX = b"db\x1fsales\x00t"
OTHER_PREFIXES = (b"db\x00n", b"db\x1fsales\x1fsub\x00t", b"db\x1fsalesx\x00t", b"zz\x00v")
TARGET_KEYS = 10_500  # live keys under MAIN_PREFIX at the end


class Model:
    """The reference: a plain dict (and its keys kept sorted)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ref: dict[bytes, IndexValue] = {}
        self.keys: list[bytes] = []  # sorted live keys
        self.ever: set[bytes] = set()
        self.deleted: list[bytes] = []
        self.serial = 0

    def put(self, key: bytes, value: IndexValue) -> None:
        if key not in self.ref:
            bisect.insort(self.keys, key)
        self.ref[key] = value
        self.ever.add(key)

    def delete(self, key: bytes) -> None:
        del self.ref[key]
        del self.keys[bisect.bisect_left(self.keys, key)]
        self.deleted.append(key)

    def live(self, prefix: bytes) -> list[bytes]:
        return self.keys[bisect.bisect_left(self.keys, prefix) : _prefix_end(self.keys, prefix)]

    def new_key(self) -> bytes:
        self.serial += 1
        prefix = MAIN_PREFIX if self.rng.random() < 0.9 else self.rng.choice(OTHER_PREFIXES)
        # Random order of arrival, so every part of the key space keeps changing.
        name = b"%s_%06d" % (self.rng.choice((b"orders", b"items", b"users", b"x")), self.serial)
        return prefix + bytes([self.rng.randrange(97, 123)]) + name


def _prefix_end(keys: list[bytes], prefix: bytes) -> int:
    pos = bisect.bisect_left(keys, prefix)
    while pos < len(keys) and keys[pos].startswith(prefix):
        pos += 1
    return pos


def _check_stripes(view: IndexView, store: Stripes) -> None:
    for stripe in view.stripes:
        entries = store.load(stripe.id)
        assert entries, "empty stripe"
        assert entries[0][0] == stripe.first and entries[-1][0] == stripe.last
        assert all(value is not None for _, value in entries), "tombstone in a stripe"
        assert [k for k, _ in entries] == sorted({k for k, _ in entries})
        assert entries_size(entries) <= LIMITS.stripe_max
    for a, b in itertools.pairwise(view.stripes):
        assert a.first <= a.last < b.first <= b.last, (a, b)


def _domain_of(stripes: Sequence[StripeRef], key: bytes) -> int:
    """The stripe whose range [first_i, first_i+1) holds ``key`` (stripe 0 also owns below)."""
    return max(bisect.bisect_right([s.first for s in stripes], key) - 1, 0)


def _commit_round(
    model: Model, view: IndexView | None, store: Stripes, ops: int
) -> tuple[IndexView, dict[bytes, IndexValue | None]]:
    update = IndexUpdate(view, store.load)
    changes: dict[bytes, IndexValue | None] = {}
    for _ in range(ops):
        roll = model.rng.random()
        if roll < 0.72 or not model.ref:
            key = model.new_key()  # a new key
        elif roll < 0.80:
            key = model.rng.choice(model.deleted) if model.deleted else model.new_key()
        elif roll < 0.88:
            key = model.rng.choice(model.keys)  # overwrite a live key
        elif roll < 0.98:
            key = model.rng.choice(model.keys)  # delete a live key
            update.remove(key)
            changes[key] = None
            model.delete(key)
            continue
        else:
            key = b"never-existed-%d" % model.rng.randrange(10**9)  # delete of nothing
            update.remove(key)
            changes[key] = None
            continue
        value = ("entity", model.rng.getrandbits(60))
        update.put(key, value)
        changes[key] = value
        model.put(key, value)
    # The update is readable while being built.
    probe = model.rng.choice(list(changes))
    assert update.get(probe) == model.ref.get(probe)

    built = update.build(LIMITS, store.new_id)
    old_stripes = list(view.stripes) if view is not None else []
    old_embedded = {k for k, _ in view.embedded} if view is not None else set()
    for obj_id, entries in built.new_stripes:
        store.put(obj_id, entries)

    assert entries_size(built.embedded) <= LIMITS.embedded_max
    merged = old_embedded | set(changes)
    spilled = merged - {k for k, _ in built.embedded}
    old_ids = {s.id for s in old_stripes}
    new_ids = {obj_id for obj_id, _ in built.new_stripes}
    assert {s.id for s in built.stripes} == (old_ids & {s.id for s in built.stripes}) | new_ids
    if not spilled:
        assert built.stripes == old_stripes and not built.new_stripes
    elif old_stripes:
        touched = {_domain_of(old_stripes, key) for key in spilled}
        for pos, stripe in enumerate(old_stripes):
            if pos in touched:
                assert stripe not in built.stripes, f"stripe {pos} received changes"
            else:
                assert stripe in built.stripes, f"untouched stripe {pos} was rewritten"
    return IndexView(built.embedded, built.stripes, store.load), changes


def _check_view(
    model: Model, view: IndexView, changes: dict[bytes, IndexValue | None], full_listing: bool
) -> None:
    rng = model.rng
    probes = set(changes)
    probes.update(rng.sample(model.keys, min(100, len(model.keys))))
    probes.update(rng.sample(model.deleted, min(50, len(model.deleted))))
    for key in probes:
        assert view.get(key) == model.ref.get(key), key
    small = (*OTHER_PREFIXES, b"q", b"db\x1fsales\x00tq")
    prefix = rng.choice((MAIN_PREFIX, b"db\x1fsales", b"db")) if full_listing else rng.choice(small)
    expected = [(k, model.ref[k]) for k in model.live(prefix)]
    assert list(view.items(prefix)) == expected
    after = rng.choice(model.keys) + rng.choice((b"", b"\x00", b"~"))
    pos = bisect.bisect_right(model.keys, after)
    got = list(itertools.islice(view.items(start_after=after), 60))
    assert got == [(k, model.ref[k]) for k in model.keys[pos : pos + 60]]
    got = list(itertools.islice(view.items(prefix, start_after=after), 60))
    assert got == [(k, v) for k, v in expected if k > after][:60]


def test_many_spill_rounds_match_a_dict_model() -> None:
    model = Model(seed=20240601)
    store = Stripes()
    view: IndexView | None = None
    rounds = 0
    while len(model.live(MAIN_PREFIX)) < TARGET_KEYS:
        rounds += 1
        assert rounds < 2000, "model did not grow"
        # Mostly small commits (own changes stay embedded), now and then a bulk one.
        ops = model.rng.randrange(300, 600) if rounds % 6 == 0 else model.rng.randrange(1, 30)
        view, changes = _commit_round(model, view, store, ops)
        _check_view(model, view, changes, full_listing=rounds % 10 == 0)
        if rounds % 50 == 0:
            _check_stripes(view, store)
    assert view is not None
    assert len(model.ever) >= 10_000
    assert len(view.stripes) > 100  # really spilled, many times
    _check_stripes(view, store)
    assert list(view.items()) == [(k, model.ref[k]) for k in model.keys]
    for key in model.ever:
        assert view.get(key) == model.ref.get(key)
    # The stripes survive the real codec unchanged.
    codec = default_codec()
    for stripe in view.stripes:
        entries = list(store.load(stripe.id))
        assert stripe_decode(codec, stripe_encode(codec, entries)) == entries

    # Paging across spills: 100 at a time under one prefix, resuming after the last key.
    expected = [(k, model.ref[k]) for k in model.live(MAIN_PREFIX)]
    assert len(expected) >= 10_000
    pages: list[tuple[bytes, IndexValue]] = []
    last: bytes | None = None
    while True:
        page = list(itertools.islice(view.items(MAIN_PREFIX, start_after=last), 100))
        if not page:
            break
        assert len(page) == 100 or len(pages) + len(page) == len(expected)
        pages.extend(page)
        last = page[-1][0]
    assert pages == expected
