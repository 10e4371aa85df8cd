"""Sections and their anchors: the ids authors give headings (`{#id}`) survive cleaning and
chunking, and name the chunk where their section starts (fast tier: no store)."""

from __future__ import annotations

import pytest
from chromadb.api.types import validate_metadata

from hetriever.chunk.chunker import chunk_page
from hetriever.chunk.sections import ANCHORS_KEY, anchored_sections, keep_given_anchors
from hetriever.chunk.tokenizer import load_token_counter
from hetriever.clean.cleaner import clean_page
from hetriever.parse.parsed_page import Page

LONG = (
    "The backend reads its settings from the site configuration, and each option is "
    "passed on to the external converter exactly as written there. "
) * 8

BODY = f"""Intro text for the page.

## AsciiDoc

### Settings {{#settings-asciidoc}}

{LONG}

### Syntax highlighting {{#syntax-highlighting-asciidoc .wide data-x="1"}}

Short.

## Pandoc {{.wide}}

### Settings

{LONG}

## reStructuredText

### Settings {{#Settings-RST}}

{LONG}
"""


@pytest.fixture(scope="module")
def chunks():
    page = Page(
        repository="hugo-docs",
        file_path="content/en/configuration/markup.md",
        url="/configuration/markup/",
        title="Markup",
        section="configuration",
        body=BODY,
    )
    blocks = clean_page(BODY)
    made = chunk_page(page, blocks, counter=load_token_counter(), max_tokens=128)
    keep_given_anchors(made, blocks)
    return made


def test_cleaning_keeps_the_id_and_drops_the_attribute_block() -> None:
    headings = [(b.text, b.anchor) for b in clean_page(BODY) if b.kind == "heading"]
    assert headings == [
        ("AsciiDoc", ""),
        ("Settings", "settings-asciidoc"),
        ("Syntax highlighting", "syntax-highlighting-asciidoc"),
        ("Pandoc", ""),
        ("Settings", ""),
        ("reStructuredText", ""),
        ("Settings", "Settings-RST"),
    ]


def test_each_id_is_on_the_chunk_where_its_section_starts(chunks) -> None:
    placed = {a: c for c in chunks for a in c.metadata.get(ANCHORS_KEY, [])}
    assert set(placed) == {"settings-asciidoc", "syntax-highlighting-asciidoc", "Settings-RST"}
    # the page's one-line introduction took in the start of the AsciiDoc settings section
    first = placed["settings-asciidoc"]
    assert first.metadata["chunk_index"] == 0 and "Settings" in first.metadata["merged_headings"]
    assert "Intro text" in first.text and "AsciiDoc > Settings\n\nThe backend" in first.text
    folded = placed["syntax-highlighting-asciidoc"]
    assert folded.metadata["heading_context"] == "AsciiDoc > Syntax highlighting"
    assert placed["Settings-RST"].metadata["heading_context"] == "reStructuredText > Settings"
    for chunk in chunks:
        validate_metadata(chunk.metadata)  # Chroma takes the list


def test_a_deep_link_finds_the_author_id_then_hugo_ones(chunks) -> None:
    starts = anchored_sections([(c.id, c.metadata) for c in chunks])
    index = {c.id: c.metadata["chunk_index"] for c in chunks}
    by_id = {c.id: c for c in chunks}
    assert (
        by_id[starts["settings-rst"][0]].metadata["heading_context"]
        == "reStructuredText > Settings"
    )
    assert starts["settings-asciidoc"] == [chunks[0].id]
    # Hugo's own anchors: one per "Settings" section, in page order (`#settings-1` is
    # Pandoc's), though the first section goes on into the chunk after the one it starts in
    assert [index[c] for c in starts["settings"]] == sorted(index[c] for c in starts["settings"])
    assert len(starts["settings"]) == 3
    assert "Pandoc > Settings\n\nThe backend" in by_id[starts["settings"][1]].text


def test_a_page_without_ids_gets_no_key() -> None:
    page = Page(
        repository="r",
        file_path="content/a.md",
        url="/a/",
        title="A",
        section="",
        body="## One\n\ntext one\n",
    )
    blocks = clean_page(page.body)
    made = chunk_page(page, blocks, counter=load_token_counter())
    keep_given_anchors(made, blocks)
    assert all(ANCHORS_KEY not in c.metadata for c in made)
