"""Properties of parse -> clean -> chunk over generated Hugo-ish pages (hypothesis).

1. Nothing raises, and the cleaner never needs its fall-back (no `clean_failed` event), on any
   text, including soup made of Hugo's delimiters.
2. No word is lost. A "word" is a lower-case ASCII token of 3..10 letters that appears only in a
   generated plain-text paragraph (or heading, list item, table cell, link text, emphasis or
   paired-shortcode body we generate around such words); the markup we interleave is
   well-formed and uses only words from a separate vocabulary, so it cannot supply them. Every
   such word must appear in the chunk texts. Words in front matter are not counted (front
   matter is metadata, not body).
3. Chunks respect the token budget and their ids are unique.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from hetriever.chunk.chunker import chunk_page
from hetriever.chunk.tokenizer import load_token_counter
from hetriever.clean.cleaner import clean_page
from hetriever.parse.page import parse_page

# Hypothesis warns when the global `random` state moves while it draws an example, whichever
# thread moved it; in a full run, background threads left by earlier tests (session-scoped
# Prefect and Chroma clients) can. The strategies below never use `random`.
pytestmark = pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")

COUNTER = load_token_counter()
MAX_TOKENS = 254  # the real budget of all-MiniLM-L6-v2 chunks
PROPERTY_SETTINGS = settings(
    max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

# Markup vocabulary: none of these can be generated as a body word (those carry a 'q').
MARKUP_NAMES = ["note", "warning", "tab", "figure", "details", "hint", "alert"]
WORD = st.from_regex(r"q[a-p]{2,9}", fullmatch=True)
WORDS = st.lists(WORD, min_size=1, max_size=12)


def _sentence(words: list[str]) -> str:
    return " ".join(words) + "."


@st.composite
def piece(draw) -> tuple[str, list[str]]:
    """One body piece: (markdown, the body words it carries)."""
    words = draw(WORDS)
    text = _sentence(words)
    name = draw(st.sampled_from(MARKUP_NAMES))
    kind = draw(
        st.sampled_from(
            [
                "paragraph",
                "heading",
                "list",
                "emphasis",
                "link",
                "table",
                "quote",
                "paired_shortcode",
                "paired_percent_shortcode",
                "html_block",
                "html_inline",
                "self_closing_shortcode",
                "code_fence",
                "comment",
                "rule",
                "image",
                "params",
            ]
        )
    )
    if kind == "paragraph":
        return text, words
    if kind == "heading":
        # Real headings are short. A heading path longer than half the budget is cut in the
        # chunk prefix by design (a runaway heading may not starve the body; see chunk.py).
        return f"{'#' * draw(st.integers(1, 6))} {' '.join(words[:6])}", words[:6]
    if kind == "list":
        return "\n".join(f"- {w}" for w in words), words
    if kind == "emphasis":
        return " ".join(f"**{w}**" if i % 2 else f"_{w}_" for i, w in enumerate(words)), words
    if kind == "link":
        return f"See [{' '.join(words)}](https://example.com/{name}/) now.", words
    if kind == "table":
        return f"| {name} | value |\n|---|---|\n" + "\n".join(
            f"| {w} | {name} |" for w in words
        ), words
    if kind == "quote":
        return "> " + text, words
    if kind == "paired_shortcode":
        return f'{{{{< {name} title="{name}" >}}}}\n{text}\n{{{{< /{name} >}}}}', words
    if kind == "paired_percent_shortcode":
        return f"{{{{% {name} %}}}}\n{text}\n{{{{% /{name} %}}}}", words
    if kind == "html_block":
        return f'<div class="{name}">\n<p>{text}</p>\n</div>', words
    if kind == "html_inline":
        return f"<span>{words[0]}</span> <em>{' '.join(words[1:])}</em> <br> end", words
    if kind == "code_fence":  # kept verbatim, so its words survive too
        return (
            f"```{draw(st.sampled_from(['go', 'yaml', '', 'go-html-template']))}\n{text}\n```",
            words,
        )
    # pure markup pieces: they carry no body words
    markup = {
        "self_closing_shortcode": f'{{{{< {name} src="/{name}.png" alt="{name}" >}}}}',
        "comment": f"<!-- {name} {name} -->",
        "rule": draw(st.sampled_from(["---", "***", "+++"])),
        "image": f"![{name}](/{name}.png)",
        "params": f'{{{{< param "{name}" >}}}}',
    }[kind]
    return markup, []


@st.composite
def hugo_page(draw) -> tuple[str, list[str]]:
    pieces = draw(st.lists(piece(), min_size=1, max_size=10))
    front = draw(
        st.sampled_from(
            [
                "",
                "---\ntitle: Generated\n---\n",
                "+++\ntitle = 'Generated'\ntags = ['alert']\n+++\n",
                '{\n  "title": "Generated"\n}\n',
                "---\ntitle: [broken\n---\n",
            ]
        )
    )
    body = "\n\n".join(p for p, _ in pieces)
    return front + "\n" + body + "\n", [w for _, ws in pieces for w in ws]


def _pipeline(text: str):
    page = parse_page("gen-docs", "content/docs/generated.md", text, content_dir="content")
    with capture_logs() as logs:
        blocks = clean_page(page.body, path=page.file_path)
    assert not [e for e in logs if e["event"] == "clean_failed"], logs
    chunks = chunk_page(page, blocks, counter=COUNTER, max_tokens=MAX_TOKENS, min_tokens=8)
    return page, blocks, chunks


def _check_chunks(chunks) -> None:
    assert len({c.id for c in chunks}) == len(chunks)
    for c in chunks:
        assert c.text.strip()
        assert COUNTER.count(c.text) <= MAX_TOKENS, (COUNTER.count(c.text), c.text[:200])


@PROPERTY_SETTINGS
@given(hugo_page())
def test_no_body_word_is_lost(generated):
    text, words = generated
    _, _, chunks = _pipeline(text)
    _check_chunks(chunks)
    found = set(re.findall(r"[a-z]+", " ".join(c.text for c in chunks)))
    missing = [w for w in words if w not in found]
    assert not missing, (missing, text)


HUGO_SOUP = st.text(
    alphabet=list("{}<>%/`#*-_[]()!|\n =\"'+.:\\&;~\t") + list("abcqxyz019é🙂"), max_size=600
)


@PROPERTY_SETTINGS
@given(st.one_of(HUGO_SOUP, st.text(max_size=400)))
def test_arbitrary_text_never_breaks_clean_or_chunk(text):
    _, _, chunks = _pipeline(text)
    _check_chunks(chunks)


@PROPERTY_SETTINGS
@given(
    st.lists(
        st.sampled_from(
            [
                "{{<",
                ">}}",
                "{{%",
                "%}}",
                "{{< /",
                "```",
                "~~~",
                "<div>",
                "</div>",
                "<!--",
                "-->",
                "---",
                "+++",
                "\n",
                "\n\n",
                "qword",
                "# ",
                "| a |",
                "<script>",
                "</script>",
                "[x](",
                ")",
                "\\",
            ]
        ),
        max_size=60,
    )
)
def test_unbalanced_delimiters_never_break_clean_or_chunk(parts):
    _, _, chunks = _pipeline("".join(parts))
    _check_chunks(chunks)
