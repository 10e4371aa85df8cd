from __future__ import annotations

import hashlib

import pytest
from chromadb.api.types import validate_metadata
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from hetriever.chunk.chunker import chunk_id, chunk_page
from hetriever.chunk.tokenizer import TokenCounter, load_token_counter
from hetriever.core.models import REQUIRED_CHUNK_METADATA, Block
from hetriever.parse.parsed_page import Page

H = lambda text, level: Block("heading", text, level)  # noqa: E731
P = lambda text: Block("paragraph", text)  # noqa: E731
C = lambda text: Block("code", text)  # noqa: E731

SENTENCES = [
    "Hugo builds static sites from Markdown content and Go templates.",
    "Each page bundle groups a page with its resources such as images.",
    "The server command watches the file system and rebuilds on change.",
    "Front matter sets the title, the date, the weight and custom parameters.",
    "Taxonomies classify content, for example by tags or by categories.",
    "Shortcodes insert reusable snippets of markup into Markdown files.",
]


def prose(n: int, offset: int = 0) -> str:
    return " ".join(SENTENCES[(offset + i) % len(SENTENCES)] for i in range(n))


def code(lines: int, fence: str = "```go", tag: str = "x") -> str:
    body = "\n".join(f'\tfmt.Println("{tag} line {i}", value{i})' for i in range(lines))
    return f"{fence}\n{body}\n{fence[:3]}"


@pytest.fixture(scope="module")
def counter():
    return load_token_counter()


def page(**overrides) -> Page:
    fields = dict(
        repository="hugo-docs",
        file_path="content/en/install/linux.md",
        url="/install/linux/",
        title="Install on Linux",
        section="install",
        body="",
    )
    fields.update(overrides)
    return Page(**fields)


def with_specials(counter: TokenCounter, text: str) -> int:
    """What the model actually reads: [CLS] + text + [SEP]."""
    return len(counter.tokenizer.encode(text, add_special_tokens=True).ids)


def body_of(text: str) -> str:
    return text.split("\n\n", 1)[1]


# --- heading context ------------------------------------------------------------------------


def test_heading_context_is_the_path_of_headings(counter):
    blocks = [
        H("Install on Linux", 1),  # the page's own H1: same as the title, not repeated
        P(prose(2)),
        H("Prerequisites", 2),
        P(prose(2, 1)),
        H("Git", 3),
        P(prose(2, 2)),
        H("Snap", 2),
        P(prose(2, 3)),
        H("Reference", 1),
        H("Flags", 2),
        P(prose(2, 4)),
    ]
    chunks = chunk_page(page(), blocks, counter=counter, min_tokens=0)
    contexts = [c.metadata["heading_context"] for c in chunks]
    assert contexts == ["", "Prerequisites", "Prerequisites > Git", "Snap", "Reference > Flags"]
    assert chunks[0].text == f"Install on Linux\n\n{prose(2)}"
    assert chunks[2].text == f"Install on Linux > Prerequisites > Git\n\n{prose(2, 2)}"
    assert [c.metadata["chunk_index"] for c in chunks] == [0, 1, 2, 3, 4]


# --- code blocks --------------------------------------------------------------------------


def test_code_blocks_are_never_split_when_they_fit(counter):
    codes = [code(8, tag=f"block{i}") for i in range(6)]
    blocks = [H("Examples", 2)]
    for i, snippet in enumerate(codes):
        blocks += [P(prose(3, i)), C(snippet)]
    chunks = chunk_page(page(), blocks, counter=counter)
    assert len(chunks) > 2  # packing had to cut somewhere
    for snippet in codes:
        assert sum(snippet in c.text for c in chunks) == 1
    assert all(c.metadata["has_code"] == ("```go" in c.text) for c in chunks)


@pytest.mark.parametrize("fence", ["```go {linenos=true}", "~~~~toml", "  ```yaml"])
def test_giant_code_block_splits_into_fenced_pieces(counter, fence):
    closing = fence.strip()[:3] if fence.strip().startswith("`") else "~~~~"
    indent = fence[: len(fence) - len(fence.lstrip())]
    lines = [f'{indent}key_{i} = "value number {i} for the configuration"' for i in range(300)]
    lines.insert(150, indent + "x" * 40 + " " + " ".join(f"w{i}" for i in range(400)))  # giant line
    snippet = "\n".join([fence, *lines, indent + closing])
    chunks = chunk_page(page(), [H("Config", 2), C(snippet)], counter=counter)
    assert len(chunks) > 3
    seen: list[str] = []
    for chunk in chunks:
        assert with_specials(counter, chunk.text) <= 256
        piece = body_of(chunk.text).split("\n")
        assert piece[0] == fence and piece[-1] == indent + closing
        assert not any(line.strip().startswith(("```", "~~~")) for line in piece[1:-1])
        assert chunk.metadata["has_code"] is True
        seen += piece[1:-1]
    # Every line comes back in order; only the giant one is cut (between words).
    assert [line for line in seen if not line.lstrip().startswith(("x", "w"))] == [
        line for line in lines if not line.lstrip().startswith("x")
    ]
    assert " ".join(seen).split() == " ".join(lines).split()


def test_unfenced_code_is_split_by_lines(counter):
    snippet = "\n".join(f"[params.section{i}]\nenabled = true" for i in range(200))
    chunks = chunk_page(page(), [C(snippet)], counter=counter)
    assert len(chunks) > 1
    assert "\n".join(body_of(c.text) for c in chunks) == snippet


# --- paragraphs ---------------------------------------------------------------------------


def test_giant_paragraph_splits_at_sentences(counter):
    text = prose(60)
    chunks = chunk_page(page(), [P(text)], counter=counter)
    assert len(chunks) > 2
    bodies = [body_of(c.text) for c in chunks]
    assert " ".join(bodies) == text
    assert all(b.endswith(".") for b in bodies)  # cut between sentences, not inside
    assert all(with_specials(counter, c.text) <= 256 for c in chunks)


def test_paragraph_without_sentence_ends_splits_at_words(counter):
    words = [f"parameter{i}" for i in range(900)]
    chunks = chunk_page(page(), [P(" ".join(words))], counter=counter)
    assert len(chunks) > 3
    assert " ".join(body_of(c.text) for c in chunks).split() == words
    assert all(with_specials(counter, c.text) <= 256 for c in chunks)


def test_one_giant_word_is_cut_between_word_pieces(counter):
    blob = "ab" * 45  # one 90-character word: many word-pieces, no word boundary
    words = " ".join([blob] * 40)
    chunks = chunk_page(page(), [P(words)], counter=counter, max_tokens=40)
    assert all(counter.count(c.text) <= 40 for c in chunks)
    assert "".join(body_of(c.text) for c in chunks).replace(" ", "") == words.replace(" ", "")


# --- the budget ---------------------------------------------------------------------------

block_strategy = st.one_of(
    st.builds(H, st.text(min_size=1, max_size=60), st.integers(1, 4)),
    st.builds(P, st.text(max_size=900)),
    st.builds(
        P, st.lists(st.sampled_from(SENTENCES + ["Go.", "1.22", "x\ny"]), max_size=80).map(" ".join)
    ),
    st.builds(lambda n, t: C(code(n, tag=t)), st.integers(0, 120), st.text(max_size=5)),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(block_strategy, max_size=12), st.sampled_from([32, 64, 254]), st.text(max_size=200))
def test_no_chunk_exceeds_the_budget(blocks, budget, title):
    counter = load_token_counter()
    chunks = chunk_page(page(title=title), blocks, counter=counter, max_tokens=budget)
    for chunk in chunks:
        assert counter.count(chunk.text) <= budget
        assert with_specials(counter, chunk.text) <= budget + 2
    has_text = any(
        b.text.strip()
        and not (
            b.kind == "heading"
            and " ".join(b.text.split()).casefold() == " ".join(title.split()).casefold()
        )
        for b in blocks
    )
    assert bool(chunks) == has_text


def test_huge_heading_path_is_truncated_in_the_prefix(counter):
    heading = " ".join(f"level{i}" for i in range(300))
    chunks = chunk_page(page(), [H(heading, 2), P(prose(3))], counter=counter)
    assert chunks
    for chunk in chunks:
        assert counter.count(chunk.text) <= 254
    assert prose(3) in " ".join(body_of(c.text) for c in chunks)
    assert chunks[0].metadata["heading_context"] == heading


def trained_metaspace_counter() -> TokenCounter:
    """A small BPE tokenizer with SentencePiece-style spaces: counts do not add up across joins."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"])
    tok.train_from_iterator(SENTENCES * 5, trainer=trainer)
    return TokenCounter(tok, model_name="test-metaspace", window=64)


def test_budget_holds_for_a_non_additive_tokenizer():
    counter = trained_metaspace_counter()
    assert not counter.additive
    blocks = [H("Usage", 2), P(prose(20)), C(code(30)), P(" ".join(f"w{i}" for i in range(300)))]
    chunks = chunk_page(page(), blocks, counter=counter, max_tokens=64)
    assert len(chunks) > 5
    assert all(counter.count(c.text) <= 64 for c in chunks)


# --- short fragments ----------------------------------------------------------------------


def test_short_fragment_merges_within_its_section(counter):
    long = prose(12)  # alone nearly fills a chunk
    blocks = [H("Setup", 2), P(long), P("See also."), P(prose(12, 3))]
    chunks = chunk_page(page(), blocks, counter=counter)
    assert [c.metadata["heading_context"] for c in chunks] == ["Setup", "Setup"]
    assert sum("See also." in c.text for c in chunks) == 1
    assert all(counter.count(body_of(c.text)) >= 24 for c in chunks)


def test_short_section_merges_with_the_next(counter):
    blocks = [
        H("Linux", 2),
        P("Use snap."),
        H("Snap", 3),
        P(prose(3)),
        H("Windows", 2),
        P(prose(3, 2)),
    ]
    chunks = chunk_page(page(), blocks, counter=counter)
    assert chunks[0].metadata["heading_context"] == "Linux"
    assert chunks[0].text == f"Install on Linux > Linux\n\nUse snap.\n\nSnap\n\n{prose(3)}"
    assert [c.metadata["heading_context"] for c in chunks] == ["Linux", "Windows"]
    # the folded section's heading is still recorded, for look-ups by heading
    assert chunks[0].metadata["merged_headings"] == ["Snap"]
    assert "merged_headings" not in chunks[1].metadata


def test_a_short_intro_records_the_heading_it_absorbs(counter):
    blocks = [
        P("Read this first."),
        H("Install the snap", 2),
        P(prose(2)),
        H("Windows", 2),
        P(prose(4, 2)),
    ]
    chunks = chunk_page(page(), blocks, counter=counter)
    assert chunks[0].metadata["heading_context"] == ""
    assert chunks[0].metadata["merged_headings"] == ["Install the snap"]
    validate_metadata(chunks[0].metadata)  # a list of strings: Chroma takes it


def test_short_page_still_yields_one_chunk(counter):
    chunks = chunk_page(page(), [P("Yes.")], counter=counter)
    assert [c.text for c in chunks] == ["Install on Linux\n\nYes."]
    headings_only = chunk_page(
        page(), [H("Install on Linux", 1), H("Overview", 2)], counter=counter
    )
    assert [c.text for c in headings_only] == ["Install on Linux\n\nOverview"]


def test_empty_body_yields_no_chunks(counter):
    assert chunk_page(page(), [], counter=counter) == []
    assert chunk_page(page(), [P("  \n "), C("\n")], counter=counter) == []
    assert chunk_page(page(), [H("Install on Linux", 1)], counter=counter) == []


# --- ids ----------------------------------------------------------------------------------


def test_chunk_id_is_sha256_of_the_fields():
    expected = hashlib.sha256(b"r\x1ff.md\x1ftext\x1f2").hexdigest()[:32]
    assert chunk_id("r", "f.md", "text", 2) == expected
    assert chunk_id("r", "f.md", "text") != chunk_id("r", "g.md", "text")


def test_ids_are_deterministic_and_follow_content(counter):
    blocks = [H("A", 2), P(prose(10)), H("B", 2), P(prose(10, 1)), H("C", 2), P(prose(10, 2))]
    first = chunk_page(page(), blocks, counter=counter)
    again = chunk_page(page(), blocks, counter=counter)
    assert [c.id for c in first] == [c.id for c in again]
    assert len(first) == 3

    edited = list(blocks)
    edited[3] = P(prose(10, 1).replace("Each page bundle", "Every page bundle"))
    changed = chunk_page(page(), edited, counter=counter)
    assert [a.id == b.id for a, b in zip(first, changed)] == [True, False, True]

    # Inserting a section moves positions but keeps the other chunks' ids.
    inserted = blocks[:2] + [H("A2", 2), P(prose(10, 4))] + blocks[2:]
    ids = {c.id for c in chunk_page(page(), inserted, counter=counter)}
    assert {c.id for c in first} < ids


def test_identical_chunks_in_one_file_get_distinct_ids(counter):
    blocks = [
        H("Example", 2),
        P(prose(10)),
        H("Other", 2),
        P(prose(4)),
        H("Example", 2),
        P(prose(10)),
    ]
    chunks = chunk_page(page(), blocks, counter=counter)
    assert chunks[0].text == chunks[-1].text
    assert len({c.id for c in chunks}) == len(chunks)
    assert chunks[0].content_hash == chunks[-1].content_hash


# --- metadata -----------------------------------------------------------------------------


def test_metadata_is_complete_and_chroma_valid(counter):
    rich = page(
        tags=["install", "linux"], front_matter={"description": "How to install.", "weight": 20}
    )
    blocks = [H("Steps", 2), P(prose(4)), C(code(5))]
    chunks = chunk_page(
        rich,
        blocks,
        counter=counter,
        extra_metadata={"access_level": "PUBLIC", "empty": [], "none": None},
    )
    plain = chunk_page(page(), blocks, counter=counter)
    for chunk in chunks + plain:
        assert validate_metadata(chunk.metadata) == chunk.metadata
        assert set(REQUIRED_CHUNK_METADATA) <= set(chunk.metadata)
        assert chunk.metadata["content_hash"] == hashlib.sha256(chunk.text.encode()).hexdigest()
    meta = chunks[0].metadata
    assert meta["tags"] == ["install", "linux"]
    assert meta["description"] == "How to install."
    assert meta["weight"] == 20
    assert meta["access_level"] == "PUBLIC"
    assert "empty" not in meta and "none" not in meta
    # No run time in chunks: it would make every run rewrite every unchanged chunk.
    assert "processed_at" not in meta
    assert (meta["repository"], meta["file_path"], meta["url"], meta["section"]) == (
        "hugo-docs",
        "content/en/install/linux.md",
        "/install/linux/",
        "install",
    )
    assert meta["has_code"] is True
    assert "tags" not in plain[0].metadata and "description" not in plain[0].metadata
