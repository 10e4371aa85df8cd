"""parse + clean over every file of the real corpora (hugo-docs v2, opentelemetry-io v2)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import chromadb
import pytest
from structlog.testing import capture_logs

from hetriever.clean.cleaner import clean_page
from hetriever.core.models import Block
from hetriever.parse.page import parse_page
from hetriever.parse.parsed_page import Page
from tests.support.helpers import corpus_version

pytestmark = pytest.mark.corpus

CORPORA = ["hugo-docs", "opentelemetry-io"]
ESCAPED = re.compile(r"\{\{[<%]\s*/\*")
CODE_PAIR_CLOSE = re.compile(r"\{\{<\s*/\s*(?:code-toggle|highlight)\s*>\}\}")
QUOTE = re.compile(r"[ \t]{0,3}>[ \t]?")


def source_fences(body: str) -> list[str]:
    """Fenced code blocks of a body, counted the CommonMark way, independently of clean.py.

    Returns each block's text with quote markers removed, fences included.
    """
    blocks: list[str] = []
    lines = body.split("\n")
    i = 0
    while i < len(lines):
        line, depth = lines[i], 0
        while True:
            m = QUOTE.match(line)
            if not m or not lines[i].lstrip().startswith(">"):
                break
            line, depth = line[m.end() :], depth + 1
        m = re.fullmatch(r"[ \t]*(`{3,}|~{3,})(.*)", line)
        if not m or (m.group(1)[0] == "`" and "`" in m.group(2)):
            i += 1
            continue
        fence, code, j = m.group(1), [line], i + 1
        while j < len(lines):
            current = lines[j]
            for _ in range(depth):
                q = QUOTE.match(current)
                current = current[q.end() :] if q else None
                if current is None:
                    break
            if current is None:
                break
            code.append(current)
            j += 1
            s = current.strip()
            if s and set(s) == {fence[0]} and len(s) >= len(fence):
                break
        blocks.append("\n".join(code).rstrip("\n") if j >= len(lines) else "\n".join(code))
        i = j
    return blocks


def outside_fences(body: str) -> str:
    text = body
    for block in source_fences(body):
        text = text.replace(block, "", 1)
    return text


def load(corpus: str) -> tuple[Path, list[Page]]:
    root = corpus_version(corpus, "v2")
    pages = []
    for path in sorted((root / "content").rglob("*.md")):
        rel = path.relative_to(root).as_posix()
        pages.append(parse_page(corpus, rel, path.read_text(encoding="utf-8")))
    return root, pages


@pytest.fixture(scope="module", params=CORPORA)
def corpus(request: pytest.FixtureRequest) -> tuple[str, Path, list[Page]]:
    root, pages = load(request.param)
    return request.param, root, pages


def test_parse_and_clean_every_file(corpus):
    name, _, pages = corpus
    assert len(pages) > 700
    with capture_logs() as logs:
        cleaned = [(page, clean_page(page.body, path=page.file_path)) for page in pages]
    failures = [e for e in logs if e["event"] in ("clean_failed", "front_matter_invalid")]
    assert failures == []
    # Real pages keep most of their prose: a warning here means the cleaner lost text.
    assert [e["path"] for e in logs if e["event"] == "over_cleaned"] == []

    bad_shortcodes, bad_fences = [], []
    for page, blocks in cleaned:
        assert all(isinstance(b, Block) and b.text for b in blocks)
        prose = "\n".join(b.text for b in blocks if b.kind != "code")
        # Shortcode markup left outside code must come only from escaped examples.
        escaped = len(ESCAPED.findall(outside_fences(page.body)))
        opens = prose.count("{{<") + prose.count("{{%")
        closes = prose.count(">}}") + prose.count("%}}")
        if opens != escaped or closes != escaped:
            bad_shortcodes.append((page.file_path, opens, closes, escaped))
        # Every source fence comes back as one code block; code-toggle pairs add one each.
        fences = source_fences(page.body)
        code = [b.text for b in blocks if b.kind == "code"]
        expected = len(fences) + len(CODE_PAIR_CLOSE.findall(page.body))
        if len(code) != expected:
            bad_fences.append((page.file_path, len(code), expected))
        # Fences with nothing for Hugo to expand come back byte-for-byte.
        for fence in fences:
            if "{{" not in fence and fence not in code:
                bad_fences.append((page.file_path, fence[:60]))
        assert not any(b.kind == "heading" and "```" in b.text for b in blocks)
    assert bad_shortcodes == []
    assert bad_fences == []


def test_every_front_matter_is_valid_chroma_metadata(corpus):
    name, _, pages = corpus
    client = chromadb.EphemeralClient()
    collection = client.create_collection(f"fm-{uuid.uuid4().hex[:12]}")
    try:
        with_metadata = [p for p in pages if p.front_matter]
        collection.add(
            ids=[p.file_path for p in with_metadata],
            embeddings=[[0.1, 0.2]] * len(with_metadata),
            metadatas=[p.front_matter for p in with_metadata],
        )
        assert collection.count() == len(with_metadata)
    finally:
        client.delete_collection(collection.name)


def make_resolver(root: Path, page: Page):
    """Find `include`d snippets the way the two sites lay them out (for this test only)."""
    content = root / "content" / "en"
    page_dir = (root / page.file_path).parent

    def resolve(target: str) -> str | None:
        target = target.strip().lstrip("/")
        head, _, tail = target.rpartition("/")
        candidates = [content / target]
        directory = page_dir
        while True:  # OTel: `_includes/` of the page's directory or any parent
            candidates.append(directory / "_includes" / target)
            if directory == content or content not in directory.parents:
                break
            directory = directory.parent
        if head:  # OTel partials named by path: docs/languages/index-intro
            candidates.append(content / head / "_includes" / tail)
            candidates.append(content / "docs" / "_includes" / tail)
        for candidate in candidates:
            for path in (candidate, candidate.with_name(candidate.name + ".md")):
                if path.is_file():
                    return path.read_text(encoding="utf-8")
        return None

    return resolve


def test_includes_resolve_and_add_text(corpus):
    name, root, pages = corpus
    with_includes = [p for p in pages if "include" in p.body or "/intro" in p.body]
    assert with_includes
    grown = 0
    with capture_logs() as logs:
        for page in with_includes:
            plain = clean_page(page.body)
            resolved = clean_page(page.body, include_resolver=make_resolver(root, page))
            grown += sum(len(b.text) for b in resolved) > sum(len(b.text) for b in plain)
    assert [e for e in logs if e["event"] == "clean_failed"] == []
    assert grown >= 20
