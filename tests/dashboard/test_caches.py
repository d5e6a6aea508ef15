"""dashboard.caches.RenderingCache: Django's LocMemCache for renderings, kept unpickled."""

from __future__ import annotations

import time
from typing import Any
from unittest import mock

import pytest
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache

from dashboard.caches import RenderingCache

pytestmark = pytest.mark.usefixtures("_fresh")


@pytest.fixture
def _fresh() -> Any:
    cache = RenderingCache("test-renderings", {"TIMEOUT": 300, "OPTIONS": {"MAX_ENTRIES": 3}})
    cache.clear()
    yield
    cache.clear()


def _cache() -> RenderingCache:
    return RenderingCache("test-renderings", {"TIMEOUT": 300, "OPTIONS": {"MAX_ENTRIES": 3}})


def test_the_rendering_caches_are_it() -> None:
    for alias in ("template_fragments", "page_fragments", "page_renderings"):
        assert isinstance(caches[alias], RenderingCache), alias


def test_a_hit_is_the_stored_object_itself_never_unpickled() -> None:
    cache = _cache()
    page = ("<html>", "ackboard-csrf-x", "</html>" * 1000)
    cache.set("page", page)
    with mock.patch("django.core.cache.backends.locmem.pickle") as pickle:
        assert cache.get("page") is page
        assert cache.get("missing", "default") == "default"
    pickle.loads.assert_not_called()
    assert cache.add("page", ("other",)) is False and cache.get("page") is page
    assert cache.add("text", "<p>row</p>") is True and cache.get("text") == "<p>row</p>"


@pytest.mark.parametrize("value", [["a"], {"a": 1}, ("a", ["b"]), b"bytes", 3])
def test_anything_but_immutable_text_is_refused(value: Any) -> None:
    cache = _cache()
    with pytest.raises(TypeError):
        cache.set("k", value)
    with pytest.raises(TypeError):
        cache.add("k", value)
    assert cache.get("k") is None
    with pytest.raises(TypeError):
        cache.incr("k")


def test_bounds_and_expiry_are_locmems() -> None:
    cache = _cache()
    for i in range(5):
        cache.set(f"k{i}", f"v{i}")
    assert len(cache._cache) <= 3  # type: ignore[attr-defined]  # culled as LocMemCache culls
    assert cache.get("k4") == "v4"
    cache.set("brief", "x", timeout=0.05)
    time.sleep(0.1)
    assert cache.get("brief") is None
    assert isinstance(cache, LocMemCache)
