"""The rerankers' bounded cache: every key asked is answered, whatever the cache's size; least recently used first out."""

from __future__ import annotations

import pytest

from weir.ranker.rerankers.lru import LruCache


def test_a_batch_larger_than_the_cache_is_answered_whole():
    calls = []

    def square(keys):
        calls.append(list(keys))
        return [k * k for k in keys]

    cache = LruCache(2)
    assert cache.get_many([1, 2, 3, 2, 1], square) == [1, 4, 9, 4, 1]
    assert calls == [[1, 2, 3]] and len(cache) == 2
    assert cache.get_many([2, 1], square) == [4, 1] and calls[-1] == [1]  # 1 went first


def test_the_least_recently_used_goes_first():
    cache = LruCache(2)
    cache.get_many(["a", "b"], lambda keys: keys)
    cache.get_many(["a"], lambda keys: pytest.fail("a is held"))  # a is now the most recent
    cache.get_many(["c"], lambda keys: keys)  # b goes
    computed = []
    cache.get_many(["a", "b", "c"], lambda keys: computed.extend(keys) or keys)
    assert computed == ["b"]


def test_a_compute_that_answers_too_few_is_an_error():
    with pytest.raises(ValueError, match="2 keys"):
        LruCache(4).get_many(["a", "b"], lambda keys: ["only one"])
