"""Importing chromadb without re-running its authors' signature checks.

chromadb marks ~200 methods with `overrides.override`, which checks each one's signature
against its base class's as the module is imported (disassembling the calling frame and
comparing type hints): 0.25 s of CPU on every process that imports chromadb, a third of a
search at the prompt. The checks guard chromadb's own code, which its tests already ran; here
the methods are only marked as overrides (the mark `overrides.EnforceOverrides` looks for).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator


def _mark(method: Any = None, **_options: Any) -> Any:
    if method is None:  # used as @override(check_signature=...)
        return _mark
    setattr(method, "__override__", True)
    return method


@contextlib.contextmanager
def override_checks_skipped() -> Iterator[None]:
    """While chromadb is first imported, `overrides.override` only marks methods."""
    if "chromadb" in sys.modules:
        yield
        return
    try:
        import overrides
    except ImportError:  # a chromadb that no longer uses it
        yield
        return
    saved: dict[str, Callable[..., Any]] = {name: getattr(overrides, name)
                                            for name in ("override", "overrides")}
    for name in saved:  # `overrides` is the decorator's older name; chromadb uses both
        setattr(overrides, name, _mark)
    try:
        yield
    finally:
        for name, decorator in saved.items():
            setattr(overrides, name, decorator)


def import_chromadb() -> None:
    with override_checks_skipped():
        import chromadb  # noqa: F401
