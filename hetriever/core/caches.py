"""The process-wide caches, known in one place.

Each cache that holds state across calls (loaded models, open stores, per-generation site
centroids, stems) registers here how it is emptied when its module is imported; `clear_all`
empties every one, `clear` the named ones (a test that resets state, a command that reopens
its index). Pure memos of a function of their arguments (`functools.lru_cache` over parsing
or a packaged file) hold no state that can go stale and are not registered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["clear", "clear_all", "register", "registered"]

_clearers: dict[str, Callable[[], None]] = {}
_guard = threading.Lock()


def register(name: str, clear_fn: Callable[[], None]) -> None:
    """Make `clear_fn` the way to empty the cache called `name` (one owner per name)."""
    with _guard:
        known = _clearers.get(name)
        if known is not None and known is not clear_fn:
            raise ValueError(f"a process cache called {name!r} is already registered")
        _clearers[name] = clear_fn


def registered() -> list[str]:
    with _guard:
        return sorted(_clearers)


def clear(*names: str) -> None:
    """Empty the named caches; an unknown name is an error (a typo must not pass silently)."""
    with _guard:
        unknown = [n for n in names if n not in _clearers]
        if unknown:
            raise KeyError(f"no process cache called {', '.join(unknown)}")
        chosen = [_clearers[n] for n in names]
    for clear_fn in chosen:
        clear_fn()


def clear_all() -> None:
    clear(*registered())
