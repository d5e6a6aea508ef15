"""The per-process caches of rendered HTML (settings.CACHES: "template_fragments",
"page_fragments", "page_renderings").

Owns ``RenderingCache``: Django's ``LocMemCache`` (the same bounds, expiry, culling and
lock) without its pickling. LocMemCache pickles each value on the way in and unpickles it
on every hit, so that a cached object cannot be changed through the copy a caller got.
A rendering is a string, or a tuple of strings (``{% fragment %}``'s text split at its
placeholders), which nothing can change: it is kept as it is. Unpickling the 116 KB
group page cost ~35 us a hit; keeping it costs nothing. Any other value is refused
(TypeError), so a mutable object is never shared between requests by mistake.
"""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.locmem import LocMemCache


def _rendering(value: Any) -> Any:
    """``value`` when it is immutable text: a string or a tuple of strings."""
    if isinstance(value, str) or (
        isinstance(value, tuple) and all(isinstance(part, str) for part in value)
    ):
        return value
    raise TypeError(f"RenderingCache keeps strings or tuples of strings, not {type(value)}")


class RenderingCache(LocMemCache):
    """``LocMemCache`` for renderings, kept as they are (see the module docstring)."""

    def add(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        value = _rendering(value)
        key = self.make_and_validate_key(key, version=version)
        with self._lock:  # type: ignore[attr-defined]  # LocMemCache's own (not in the stubs)
            if self._has_expired(key):  # type: ignore[attr-defined]
                self._set(key, value, timeout)  # type: ignore[attr-defined]
                return True
            return False

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        key = self.make_and_validate_key(key, version=version)
        with self._lock:  # type: ignore[attr-defined]
            if self._has_expired(key):  # type: ignore[attr-defined]
                self._delete(key)  # type: ignore[attr-defined]
                return default
            value = self._cache[key]  # type: ignore[attr-defined]
            self._cache.move_to_end(key, last=False)  # type: ignore[attr-defined]
        return value

    def set(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> None:
        value = _rendering(value)
        key = self.make_and_validate_key(key, version=version)
        with self._lock:  # type: ignore[attr-defined]
            self._set(key, value, timeout)  # type: ignore[attr-defined]

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        raise TypeError("RenderingCache keeps renderings, not counters")
