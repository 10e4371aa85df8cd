"""parse.py: front matter formats, Chroma-valid values, Hugo URLs, titles, sections, skip rules."""

from __future__ import annotations

import json
import uuid

import chromadb
import pytest
from structlog.testing import capture_logs

from hetriever.parse.page import PUBLIC_KEYS, page_url, parse_page, public_metadata, skip_reason


def parse(text: str, path: str = "content/en/docs/page.md"):
    return parse_page("site", path, text)


def assert_chroma_accepts(metadata: dict) -> None:
    """Write the metadata to a real (in-memory) Chroma collection and read it back unchanged."""
    client = chromadb.EphemeralClient()
    name = f"fm-{uuid.uuid4().hex[:12]}"
    collection = client.create_collection(name)
    try:
        collection.add(ids=["x"], embeddings=[[0.1, 0.2]], metadatas=[metadata])
        stored = collection.get(ids=["x"])["metadatas"][0]
        assert stored == metadata
    finally:
        client.delete_collection(name)


# --- front matter formats ---------------------------------------------------------------


def test_yaml_front_matter():
    page = parse(
        "---\ntitle: Where\nlinkTitle: where\ntags: [a, b]\nweight: 10\n"
        "params:\n  x: 1\n---\n\nBody text.\n"
    )
    assert page.front_matter == {
        "title": "Where",
        "linkTitle": "where",
        "tags": ["a", "b"],
        "weight": 10,
    }
    assert page.title == "Where"
    assert page.tags == ["a", "b"]
    assert page.body == "\nBody text.\n"
    assert page.front_matter_error == ""


def test_toml_front_matter():
    page = parse(
        '+++\ntitle = "Install"\ndate = 2024-03-01T10:00:00Z\nweight = 2.5\n'
        'draft = true\ncategories = ["setup"]\n+++\nSteps.\n'
    )
    assert page.title == "Install"
    assert page.front_matter["date"].startswith("2024-03-01T10:00:00")
    assert page.front_matter["weight"] == 2.5
    assert page.front_matter["categories"] == ["setup"]
    assert page.draft is True
    assert page.body == "Steps.\n"


def test_json_front_matter():
    page = parse(
        '{\n  "title": "JSON page",\n  "tags": "solo",\n  "aliases": ["/old/"]\n}\nText after.\n'
    )
    assert page.front_matter == {"title": "JSON page", "tags": ["solo"], "aliases": ["/old/"]}
    assert page.body == "Text after.\n"


def test_body_starting_with_a_shortcode_is_not_json():
    text = "{{< figure src=x >}}\nHello\n"
    page = parse(text)
    assert page.body == text and page.front_matter == {} and page.front_matter_error == ""


def test_no_front_matter_keeps_everything():
    page = parse("Just text.\n", "content/en/_includes/note.md")
    assert page.body == "Just text.\n"
    assert page.front_matter == {}
    assert page.title == "Note"


def test_comment_only_front_matter_is_empty_not_an_error():
    page = parse("---\n# nothing here\n---\nText\n", "content/en/_common/store-methods.md")
    assert page.front_matter == {} and page.front_matter_error == ""
    assert page.title == "Store methods"


# --- malformed front matter ---------------------------------------------------------------


def test_malformed_yaml_keeps_body_and_logs():
    text = "---\ntitle: [unclosed\ntags: a\n---\nThe body survives.\n"
    with capture_logs() as logs:
        page = parse(text, "content/en/guides/broken-page.md")
    assert page.front_matter == {}
    assert page.front_matter_error.startswith("invalid YAML front matter")
    assert page.body == "The body survives.\n"
    assert page.title == "Broken page"
    assert page.url == "/guides/broken-page/"
    events = [e for e in logs if e["event"] == "front_matter_invalid"]
    assert len(events) == 1 and events[0]["log_level"] == "warning"
    assert events[0]["path"] == "content/en/guides/broken-page.md"


def test_malformed_toml_keeps_body():
    page = parse('+++\ntitle = "unterminated\n+++\nStill here.\n')
    assert page.front_matter == {}
    assert "TOML" in page.front_matter_error
    assert page.body == "Still here.\n"


def test_unclosed_front_matter_keeps_whole_text():
    text = "---\ntitle: x\nNo closing line\n"
    page = parse(text)
    assert page.front_matter == {}
    assert "unclosed" in page.front_matter_error
    assert page.body == text


def test_front_matter_that_is_not_a_mapping():
    page = parse("---\n- a\n- b\n---\nBody\n")
    assert page.front_matter == {} and "not a mapping" in page.front_matter_error
    assert page.body == "Body\n"


def test_malformed_json_keeps_whole_text():
    text = '{\n  "title": "x",\n}\nBody\n'
    page = parse(text)
    assert page.front_matter == {} and "JSON" in page.front_matter_error
    assert page.body == text


# --- values made Chroma-valid ---------------------------------------------------------------


def test_scalar_tags_become_lists():
    assert parse("---\ntags: 5\n---\n").front_matter["tags"] == ["5"]
    assert parse("---\ntags: a\n---\n").front_matter["tags"] == ["a"]
    assert parse("---\nkeywords: [x, 3, true]\n---\n").front_matter["keywords"] == [
        "x",
        "3",
        "true",
    ]


def test_empty_null_and_nested_values_are_dropped():
    page = parse(
        "---\ntitle: T\ncategories: []\nkeywords: ~\ndescription:\n"
        "tags: [a, {nested: 1}, null, [b], '']\nslug: {x: 1}\nweight: heavy\n---\n"
    )
    assert page.front_matter == {"title": "T", "tags": ["a"]}


def test_dates_and_numbers():
    page = parse(
        "---\ntitle: 1.10\ndate: 2025-05-20\nweight: 1.5\ndraft: 'false'\n"
        "linkTitle: 2024-01-02T03:04:05Z\n---\n"
    )
    fm = page.front_matter
    assert fm["date"] == "2025-05-20"
    assert fm["linkTitle"].startswith("2024-01-02T03:04:05")
    assert fm["title"] == "1.1"  # YAML read a version-like title as a float: keep it a string
    assert fm["weight"] == 1.5 and isinstance(fm["weight"], float)
    assert fm["draft"] is False
    json.dumps(fm)  # nothing left that JSON cannot carry


def test_description_markup_is_stripped():
    page = parse(
        '---\ndescription: >-\n  <img width="35" src="/img/go.svg" alt="Go"> A'
        " language-specific\n  implementation in [Go](https://go.dev).\n---\n"
    )
    assert page.front_matter["description"] == "A language-specific implementation in Go."


def test_messy_front_matter_is_accepted_by_chroma():
    page = parse(
        "---\ntitle: 1.0\ntags: 5\ncategories: [a, 1, {b: 2}]\ndate: 2024-01-01\n"
        "weight: 3\ndraft: no\naliases: /one\nkeywords: []\nbuild: {render: link}\n"
        "redirect: /elsewhere/\nparams: {x: [1, 2]}\ncSpell:ignore: foo\n---\n"
    )
    assert set(public_metadata(page)) <= set(PUBLIC_KEYS)
    assert_chroma_accepts(page.front_matter)


# --- URLs, titles, sections -------------------------------------------------------------


@pytest.mark.parametrize(
    "path, front_matter, url",
    [
        ("content/en/functions/where.md", {}, "/functions/where/"),
        ("content/en/functions/collections/Where.md", {}, "/functions/collections/where/"),
        ("content/en/functions/_index.md", {}, "/functions/"),
        ("content/en/_index.md", {}, "/"),
        ("content/en/blog/2024/my-post/index.md", {}, "/blog/2024/my-post/"),
        ("content/en/docs/old-name.md", {"slug": "new-name"}, "/docs/new-name/"),
        ("content/en/docs/bundle/index.md", {"slug": "Other"}, "/docs/other/"),
        ("content/en/commands/hugo_mod.md", {"url": "/commands/hugo_mod/"}, "/commands/hugo_mod/"),
        ("content/en/a/b.md", {"url": "custom/Path"}, "/custom/Path"),
        ("content/en/Getting Started/First Steps.md", {}, "/getting-started/first-steps/"),
        ("content/docs/page.md", {}, "/docs/page/"),  # no language dir
        ("content/fr/docs/page.md", {}, "/fr/docs/page/"),  # not a configured language dir
    ],
)
def test_page_url(path, front_matter, url):
    assert page_url(path, front_matter) == url


def test_page_url_other_content_dir_and_languages():
    assert (
        page_url("site/content/de/x.md", {}, content_dir="site/content", language_dirs=("en", "de"))
        == "/x/"
    )


def test_titles_from_file_names():
    assert parse("Body", "content/en/getting-started/quick-start.md").title == "Quick start"
    assert parse("Body", "content/en/getting-started/_index.md").title == "Getting started"
    assert parse("Body", "content/en/blog/my_post/index.md").title == "My post"
    assert parse("Body", "content/en/_index.md").title == "Home"
    assert parse("---\nlinkTitle: Short\n---\n").title == "Short"


def test_sections():
    assert parse("", "content/en/functions/collections/where.md").section == "functions"
    assert parse("", "content/en/functions/_index.md").section == "functions"
    assert parse("", "content/en/_index.md").section == ""
    assert parse("", "content/en/documentation.md").section == ""


# --- skip rules -------------------------------------------------------------------------


def test_skip_draft():
    page = parse("---\ntitle: x\ndraft: true\n---\nText\n")
    assert skip_reason(page) == "draft"
    assert skip_reason(page, include_drafts=True) is None


def test_skip_snippets():
    assert (
        skip_reason(parse("---\n---\nx", "content/en/_common/methods/x.md"))
        == "snippet (not a page)"
    )
    assert skip_reason(parse("x", "content/en/docs/_includes/intro.md")) == "snippet (not a page)"
    assert skip_reason(parse("x", "content/en/docs/_index.md")) is None


def test_skip_redirect_stubs():
    stub = "---\ntitle: API\nredirect: /docs/languages/\nbuild: { render: link }\n---\n"
    assert skip_reason(parse(stub)) == "redirect stub"
    assert skip_reason(parse("---\nbuild:\n  render: never\n---\nText\n")) == "redirect stub"
    assert (
        skip_reason(parse("---\nredirect: /x/\n---\n\n<!-- only a comment -->\n"))
        == "redirect stub"
    )
    # A redirect key on a page with real content does not make it a stub.
    assert skip_reason(parse("---\nredirect: /x/\n---\nReal words here.\n")) is None
    assert skip_reason(parse("---\nbuild:\n  list: never\n---\nText\n")) is None


def test_skip_headless_bundle():
    assert (
        skip_reason(parse("---\nheadless: true\n---\n", "content/en/h/index.md"))
        == "headless bundle"
    )


def test_cascade_is_what_a_section_passes_down_and_targets_are_left_out():
    text = (
        "---\ntitle: Java\nvers: {own: 1}\ncascade:\n  - vers: {otel: 1.64.0}\n"
        "    params: {color: blue}\n  - _target: {path: '/blog/**'}\n    vers: {otel: 0.1}\n"
        "---\n"
    )
    page = parse_page("r", "content/docs/java/_index.md", text)
    assert page.cascade == {"vers.otel": "1.64.0", "params.color": "blue", "color": "blue"}
    assert page.params["vers.own"] == "1" and "vers.otel" not in page.params
    single = parse_page("r", "content/_index.md", "---\ncascade:\n  draft: false\n---\n")
    assert single.cascade == {"draft": "false"}
    assert parse_page("r", "content/x.md", "---\ntitle: X\n---\n").cascade == {}
