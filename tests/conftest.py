from __future__ import annotations

import pytest

from tests.helpers import corpus_version

pytest_plugins = ["tests.prefect_fixtures", "tests.chroma_fixtures"]


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
