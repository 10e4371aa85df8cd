"""chromadb imported through hetriever skips work a search never needs (override signature
checks, OpenTelemetry's SDK and gRPC exporter, the embedding-function registry, Tornado) and
still works: Chroma's tracing, turned on, gets the real SDK, a collection that names an
embedding function gets it from the real registry, and other importers get the real modules. Each case runs in a fresh
interpreter, where chromadb is imported for the first time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _run(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_search_process_imports_chromadb_without_tracing_sdk_or_signature_checks():
    found = _run("""
        import json, sys
        import hetriever.core.names
        import chromadb.api.rust as rust
        heavy = ["grpc", "google.protobuf", "psutil", "opentelemetry.sdk.trace",
                 "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
                 "chromadb.utils.embedding_functions", "httpx._main", "rich", "tornado"]
        print(json.dumps({"loaded": [m for m in heavy if m in sys.modules],
                          "marked": getattr(rust.RustBindingsAPI.heartbeat, "__override__",
                                            False),
                          "rust_before_client": "chromadb.api.rust" in sys.modules}))
    """)
    assert found == {"loaded": [], "marked": True, "rust_before_client": True}


def test_chromas_tracing_turned_on_gets_the_real_sdk_and_exporter():
    found = _run("""
        import json
        import hetriever.core.names
        import chromadb.telemetry.opentelemetry as chroma_otel
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        chroma_otel.otel_init("hetriever-test", "http://127.0.0.1:9", {},
                              chroma_otel.OpenTelemetryGranularity.ALL)
        provider = trace.get_tracer_provider()
        processors = provider._active_span_processor._span_processors
        exporter = processors[0].span_exporter if hasattr(processors[0], "span_exporter") \
            else processors[0]._batch_processor._exporter
        print(json.dumps({
            "provider": isinstance(provider, TracerProvider),
            "service": provider.resource.attributes.get(SERVICE_NAME),
            "exporter": isinstance(exporter, OTLPSpanExporter),
            "same_key": chroma_otel.SERVICE_NAME == SERVICE_NAME,
            "tracer": chroma_otel.tracer is not None}))
        provider.shutdown()
    """)
    assert found == {
        "provider": True,
        "service": "hetriever-test",
        "exporter": True,
        "same_key": True,
        "tracer": True,
    }


def test_other_importers_get_the_real_tracing_modules():
    found = _run("""
        import json, sys
        import hetriever.core.names
        import opentelemetry.sdk.trace.export as export
        from opentelemetry.sdk.resources import Resource
        print(json.dumps({"real": isinstance(export.BatchSpanProcessor, type)
                                  and isinstance(Resource, type),
                          "grpc": "grpc" in sys.modules}))
    """)
    assert found == {"real": True, "grpc": False}


def test_a_collection_that_names_an_embedding_function_gets_it_from_the_real_registry(tmp_path):
    found = _run(f"""
        import json, sys
        import hetriever.core.names
        import chromadb
        from chromadb.api.collection_configuration import known_embedding_functions

        before = "chromadb.utils.embedding_functions" in sys.modules
        from chromadb.utils.embedding_functions import DefaultEmbeddingFunction
        client = chromadb.PersistentClient(path={str(tmp_path)!r})
        client.create_collection("named", embedding_function=DefaultEmbeddingFunction())
        opened = chromadb.PersistentClient(path={str(tmp_path)!r}).get_collection("named")
        print(json.dumps({{"before": before,
                          "default": known_embedding_functions["default"].__name__,
                          "opened": type(opened._embedding_function).__name__}}))
    """)
    assert found == {
        "before": False,
        "default": "DefaultEmbeddingFunction",
        "opened": "DefaultEmbeddingFunction",
    }


def test_unused_optional_modules_are_left_out_and_a_later_import_gets_them():
    found = _run("""
        import json, sys
        import hetriever.core.names
        import httpx, tenacity
        without = [tenacity.tornado is None, "httpx._main" not in sys.modules]
        import tornado
        import httpx._main
        print(json.dumps({"without": without, "tornado": hasattr(tornado, "version"),
                          "httpx_cli": callable(httpx._main.main)}))
    """)
    assert found == {"without": [True, True], "tornado": True, "httpx_cli": True}
