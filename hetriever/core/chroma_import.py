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
- The embedding-function registry: `chromadb.api.collection_configuration` imports it for two
  names, and the registry imports every provider's client module (httpx, rich, jsonschema):
  ~0.14 s. The two names are stand-ins that import the registry when first used (a collection
  whose configuration names an embedding function); hetriever embeds itself and never does.
- Optional modules of chromadb's dependencies that nothing here uses, imported where
  installed: httpx's command-line client (`httpx._main`: click, rich, pygments; ~0.12 s) and
  Tornado, which tenacity imports for retrying Tornado coroutines (Dask brings it; ~0.05 s).
  While their importer is first imported they are missing, as they would be where not
  installed; a later import of either gets the real module.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Callable, Iterator, Mapping
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


_REGISTRY = "chromadb.utils.embedding_functions"


class _Registry(Mapping[str, Any]):
    """`known_embedding_functions`, read from the real registry, imported when first read."""

    def _known(self) -> Mapping[str, Any]:
        known: Mapping[str, Any] = importlib.import_module(_REGISTRY).known_embedding_functions
        return known

    def __getitem__(self, name: str) -> Any:
        return self._known()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._known())

    def __len__(self) -> int:
        return len(self._known())


@contextlib.contextmanager
def _registry_deferred() -> Iterator[None]:
    """A stand-in for the embedding-function registry while chromadb is imported."""
    if _REGISTRY in sys.modules:
        yield
        return
    stand_in = types.ModuleType(_REGISTRY, "imported when an embedding function is looked up")
    setattr(stand_in, "known_embedding_functions", _Registry())
    setattr(
        stand_in,
        "register_embedding_function",
        _deferred(_REGISTRY, "register_embedding_function"),
    )
    sys.modules[_REGISTRY] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(_REGISTRY) is stand_in:
            del sys.modules[_REGISTRY]


# An optional module, and the module whose first import would import it if installed.
_UNUSED_OPTIONAL = {"httpx._main": "httpx", "tornado": "tenacity"}


@contextlib.contextmanager
def _optional_missing() -> Iterator[None]:
    """Each unused optional module fails to import (a None entry in sys.modules) while its
    importer is first imported."""
    hidden = [
        module
        for module, importer in _UNUSED_OPTIONAL.items()
        if module not in sys.modules and importer not in sys.modules
    ]
    for module in hidden:
        sys.modules[module] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for module in hidden:
            if module in sys.modules and sys.modules[module] is None:
                del sys.modules[module]


@contextlib.contextmanager
def override_checks_skipped() -> Iterator[None]:
    """While chromadb is first imported: methods only marked as overrides, tracing and the
    embedding-function registry deferred, unused optional modules missing, and the embedded client's
    API imported alike once chromadb is."""
    if "chromadb" in sys.modules:
        yield
        return
    with _marks_only("chromadb"), _tracing_deferred(), _registry_deferred(), _optional_missing():
        yield
        if "chromadb" in sys.modules:
            with contextlib.suppress(ImportError):  # a client of a Chroma server goes without
                import chromadb.api.rust  # noqa: F401


def import_chromadb() -> None:
    with override_checks_skipped():
        import chromadb  # noqa: F401
