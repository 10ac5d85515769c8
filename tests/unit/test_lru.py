"""The one byte-bounded LRU of the memory caches: bounded by weight, evictions for room
counted, invalidations not."""

from __future__ import annotations

from gateway.lru import ByteLRU


def test_weight_bounds_it_and_evictions_are_counted() -> None:
    lru: ByteLRU[str, bytes] = ByteLRU(10, len)
    lru["a"] = b"1234"
    lru["b"] = b"1234"
    assert lru.get("a") == b"1234"  # "a" is now the most recent
    lru["c"] = b"1234"  # 12 bytes: "b", the least recent, makes room
    assert set(lru) == {"a", "c"} and lru.currsize == 8 and lru.evictions == 1
    del lru["a"]
    lru.pop("c")
    assert lru.currsize == 0 and lru.evictions == 1  # invalidations are not evictions
