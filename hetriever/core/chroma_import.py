"""Importing chromadb without the import-time work a process that uses it never needs.

- Signature checks: chromadb marks ~200 methods with `overrides.override`, which checks each
  one's signature against its base class's as the module is imported (disassembling the
  calling frame and comparing type hints): 0.25 s of CPU on every process that imports
  chromadb, a third of a search at the prompt. The checks guard chromadb's own code, which its
  tests already ran; here the methods are only marked as overrides (the mark
  `overrides.EnforceOverrides` looks for). The embedded client's API (`chromadb.api.rust`),
  which chromadb imports when the first `PersistentClient` starts, is imported so too.
- OpenTelemetry's SDK and its gRPC span exporter: `chromadb.telemetry.opentelemetry` imports
  them for the tracing that Chroma's `chroma_otel_granularity` setting turns on (off by
  default), pulling in grpc, protobuf and psutil: ~0.15 s of CPU. While chromadb is imported
  the four names it takes from them are stand-ins that import the real ones when called, so
  tracing still works when turned on; other importers get the real modules.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

# What `chromadb.telemetry.opentelemetry` imports from OpenTelemetry's SDK and exporter.
_TRACING_NAMES = {
    "opentelemetry.sdk.resources": ("Resource",),
    "opentelemetry.sdk.trace": ("TracerProvider",),
    "opentelemetry.sdk.trace.export": ("BatchSpanProcessor",),
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter": ("OTLPSpanExporter",),
}
SERVICE_NAME = "service.name"  # opentelemetry.sdk.resources.SERVICE_NAME (semantic conventions)


def _mark(method: Any = None, **_options: Any) -> Any:
    if method is None:  # used as @override(check_signature=...)
        return _mark
    setattr(method, "__override__", True)
    return method


@contextlib.contextmanager
def _marks_only(module: str) -> Iterator[None]:
    """While `module` is first imported, `overrides.override` only marks methods."""
    if module in sys.modules:
        yield
        return
    try:
        import overrides
    except ImportError:  # a chromadb that no longer uses it
        yield
        return
    saved: dict[str, Callable[..., Any]] = {
        name: getattr(overrides, name) for name in ("override", "overrides")
    }
    for name in saved:  # `overrides` is the decorator's older name; chromadb uses both
        setattr(overrides, name, _mark)
    try:
        yield
    finally:
        for name, decorator in saved.items():
            setattr(overrides, name, decorator)


def _deferred(module: str, name: str) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    make.__name__ = make.__qualname__ = name
    return make


@contextlib.contextmanager
def _tracing_deferred() -> Iterator[None]:
    """Stand-ins for the tracing modules chromadb imports (where none is imported yet)."""
    stand_ins: dict[str, types.ModuleType] = {}
    for module, names in _TRACING_NAMES.items():
        if module in sys.modules:
            continue
        stand_in = types.ModuleType(module, "imported when chromadb's tracing is turned on")
        for name in names:
            setattr(stand_in, name, _deferred(module, name))
        setattr(stand_in, "SERVICE_NAME", SERVICE_NAME)
        stand_ins[module] = sys.modules[module] = stand_in
    try:
        yield
    finally:
        for module, stand_in in stand_ins.items():
            if sys.modules.get(module) is stand_in:
                del sys.modules[module]


@contextlib.contextmanager
def override_checks_skipped() -> Iterator[None]:
    """While chromadb is first imported: methods only marked as overrides, tracing deferred,
    and the embedded client's API imported alike once chromadb is."""
    if "chromadb" in sys.modules:
        yield
        return
    with _marks_only("chromadb"), _tracing_deferred():
        yield
        if "chromadb" in sys.modules:
            with contextlib.suppress(ImportError):  # a client of a Chroma server goes without
                import chromadb.api.rust  # noqa: F401


def import_chromadb() -> None:
    with override_checks_skipped():
        import chromadb  # noqa: F401
