from __future__ import annotations

import os
import tempfile

import pytest

# No network here: keep Prefect's and Chroma's servers from trying to send telemetry.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")
# An index made without HETRIEVER_CHROMA_PATH goes under the user's data directory: a test
# that makes one (or a CLI subprocess it starts) writes in a directory of the run's own.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="hetriever-test-data-")
# A search leaves no resident search process behind unless its test asks for one
# (tests/search/test_resident_search.py); its sockets would go in a directory of the run's own.
os.environ["HETRIEVER_SEARCH_RESIDENT_IDLE"] = "0"
os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="hetriever-run-")

from deployments.server_settings import apply_server_settings
from hetriever.core.logs import configured_structlog
from tests.support.helpers import corpus_version

apply_server_settings()  # the harness's server records task runs as hetriever's servers do

pytest_plugins = [
    "tests.support.prefect_fixtures",
    "tests.support.chroma_fixtures",
    "tests.support.serve_fixtures",
    "tests.support.versions",
]


@pytest.fixture(autouse=True)
def _logging_configured():
    """hetriever's logging configuration applied before a test starts: applied at its first
    line instead, it would replace what the test's `capture_logs` set up to capture."""
    configured_structlog()


@pytest.fixture
def hugo_docs_v1():
    return corpus_version("hugo-docs", "v1")


@pytest.fixture
def hugo_docs_v2():
    return corpus_version("hugo-docs", "v2")


@pytest.fixture
def otel_v1():
    return corpus_version("opentelemetry-io", "v1")


@pytest.fixture
def otel_v2():
    return corpus_version("opentelemetry-io", "v2")
