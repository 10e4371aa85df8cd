"""parse -> skip rules -> clean -> chunk over every page of hugo-docs v2 (files read from disk)."""

from __future__ import annotations

import re

import pytest
from chromadb.api.types import validate_metadata

from hetriever.chunk.chunker import chunk_page
from hetriever.chunk.tokenizer import load_token_counter
from hetriever.clean.cleaner import clean_page
from hetriever.core.models import REQUIRED_CHUNK_METADATA
from hetriever.parse.page import parse_page, skip_reason

pytestmark = pytest.mark.corpus

# Shortcode delimiters; the escaped, literal form `{{</* x */>}}` is documentation text to keep.
SHORTCODE = re.compile(r"\{\{[<%](?!/\*)")
ESCAPED = re.compile(r"\{\{[<%]/\*")
FENCED = re.compile(r"^([ \t]*)(`{3,}|~{3,}).*?^\1\2[`~]*[ \t]*$", re.M | re.S)


@pytest.fixture(scope="module")
def outcomes():
    from tests.support.helpers import corpus_version

    root = corpus_version("hugo-docs", "v2")
    counter = load_token_counter()
    results = {}
    bodies = {}
    for path in sorted(root.rglob("*.md")):
        rel = path.relative_to(root).as_posix()
        page = parse_page("hugo-docs", rel, path.read_text(encoding="utf-8"), content_dir="content")
        bodies[rel] = page.body
        reason = skip_reason(page, include_drafts=False)
        if reason:
            results[rel] = ("skipped", reason)
            continue
        chunks = chunk_page(
            page, clean_page(page.body), counter=counter, extra_metadata={"access_level": "PUBLIC"}
        )
        results[rel] = ("chunks", chunks) if chunks else ("skipped", "empty body")
    return counter, results, bodies


def all_chunks(outcomes):
    return [c for kind, value in outcomes[1].values() if kind == "chunks" for c in value]


def test_every_file_is_chunked_or_skipped_with_a_reason(outcomes):
    _, results, _ = outcomes
    assert len(results) > 900
    for path, (kind, value) in results.items():
        assert value, path
        if kind == "skipped":
            assert isinstance(value, str) and value.strip(), path
    chunked = [p for p, (kind, _) in results.items() if kind == "chunks"]
    assert len(chunked) > 800  # nearly every page has text


def test_no_chunk_exceeds_the_model_window(outcomes):
    counter = outcomes[0]
    texts = [c.text for c in all_chunks(outcomes)]
    full = [len(e.ids) for e in counter.tokenizer.encode_batch(texts, add_special_tokens=True)]
    assert max(full) <= 256
    assert len(texts) > 1000


def test_no_shortcode_delimiters_outside_code(outcomes):
    # clean.py turns an escaped example `{{</* x */>}}` into the literal text `{{< x >}}`, so a
    # page may show as many delimiters in its prose as its source escapes, and no more.
    _, results, bodies = outcomes
    leftovers = {}
    for path, (kind, chunks) in results.items():
        if kind != "chunks":
            continue
        shown = sum(len(SHORTCODE.findall(FENCED.sub("", c.text))) for c in chunks)
        escaped = len(ESCAPED.findall(FENCED.sub("", bodies[path])))
        if shown > escaped:
            leftovers[path] = (shown, escaped)
    assert leftovers == {}


def test_metadata_is_chroma_valid(outcomes):
    ids = set()
    for chunk in all_chunks(outcomes):
        assert validate_metadata(chunk.metadata) == chunk.metadata
        assert set(REQUIRED_CHUNK_METADATA) <= set(chunk.metadata)
        ids.add((chunk.file_path, chunk.id))
    assert len(ids) == len(all_chunks(outcomes))
