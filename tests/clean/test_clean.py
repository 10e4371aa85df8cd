"""clean.py: fences, shortcodes, HTML and Markdown -> Blocks, on small hand-written documents."""

from __future__ import annotations

import textwrap

import pytest
from structlog.testing import capture_logs

from hetriever.clean.cleaner import blocks_to_text, clean_page, cleaned_ratio
from hetriever.core.models import Block


def doc(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def kinds(blocks: list[Block]) -> list[str]:
    return [b.kind for b in blocks]


def texts(blocks: list[Block], kind: str | None = None) -> list[str]:
    return [b.text for b in blocks if kind is None or b.kind == kind]


def prose(blocks: list[Block]) -> str:
    return "\n".join(b.text for b in blocks if b.kind != "code")


# --- fenced code --------------------------------------------------------------------------


def test_fences_are_kept_byte_for_byte():
    body = doc("""
        Intro text.

        ```go-html-template
        {{ range .Pages }}
        # not a heading
          {{ .Title }}   
        {{ end }}
        ```

        ~~~~ toml
        [params]
        ```
        still code
        ~~~~

        After.
        """)
    blocks = clean_page(body)
    assert kinds(blocks) == ["paragraph", "code", "code", "paragraph"]
    assert blocks[1].text == (
        "```go-html-template\n{{ range .Pages }}\n# not a heading\n"
        "  {{ .Title }}   \n{{ end }}\n```"
    )
    assert blocks[2].text == "~~~~ toml\n[params]\n```\nstill code\n~~~~"
    assert not any(b.kind == "heading" for b in blocks)


def test_indented_fence_in_a_list():
    body = "1. Run:\n\n   ```sh\n   make\n   ```\n\n2. Done.\n"
    blocks = clean_page(body)
    assert texts(blocks) == ["Run:", "   ```sh\n   make\n   ```", "Done."]


def test_fence_left_open_runs_to_the_end():
    body = "Text.\n\n```go\nfunc main() {}\n\n## Not a heading\n\n{{< new-in 1.0 />}}\n"
    blocks = clean_page(body)
    assert kinds(blocks) == ["paragraph", "code"]
    assert blocks[1].text == "```go\nfunc main() {}\n\n## Not a heading\n\n{{< new-in 1.0 />}}"


def test_fence_inside_a_block_quote():
    body = "> [!NOTE]\n> Example:\n>\n> ```yaml\n> a: 1\n>\n> b: 2\n> ```\n\nAfter.\n"
    blocks = clean_page(body)
    assert texts(blocks) == ["Note: Example:", "```yaml\na: 1\n\nb: 2\n```", "After."]


def test_param_inside_code_is_substituted_other_shortcodes_stay():
    body = doc("""
        ```sh
        docker pull otel/opentelemetry-collector:{{% param vers %}}
        echo {{% _param "lang" %}} {{% version-from-registry collector-builder %}}
        ```
        """)
    [block] = clean_page(body, params={"vers": "0.130.0"})
    assert block.text == (
        "```sh\ndocker pull otel/opentelemetry-collector:0.130.0\n"
        "echo lang {{% version-from-registry collector-builder %}}\n```"
    )


def test_escaped_shortcodes_inside_code_become_literal():
    body = doc("""
        ```md
        {{</* figure
          src="/a.jpg"
        */>}}
        {{%/* param x */%}}
        ```
        """)
    [block] = clean_page(body, params={"x": "VALUE"})
    assert block.text == '```md\n{{< figure\n  src="/a.jpg"\n>}}\n{{% param x %}}\n```'


# --- shortcodes ---------------------------------------------------------------------------


def test_go_template_outside_fences_is_text():
    blocks = clean_page("Use {{ .Title }} and {{ $x := 1 }} in templates.\n")
    assert texts(blocks) == ["Use {{ .Title }} and {{ $x := 1 }} in templates."]


def test_escaped_shortcodes_outside_code_are_literal_text():
    body = 'Call `{{</* myshortcode arg */>}}` or {{%/* include "x.md" */%}} in content.\n'
    assert (
        prose(clean_page(body))
        == 'Call {{< myshortcode arg >}} or {{% include "x.md" %}} in content.'
    )


def test_mixed_delimiters_spacing_and_several_tags_per_line():
    body = doc("""
        {{< tabpane text=true >}} {{% tab Go %}}

        Go text.

        {{< /tab >}} {{% tab "Java (Maven)" %}}

        Java text.

        {{% /tab %}} {{< /tabpane>}}

        End.
        """)
    assert texts(clean_page(body)) == ["Go:", "Go text.", "Java (Maven):", "Java text.", "End."]


def test_nested_tabpane_keeps_each_tab_and_its_code_in_order():
    body = doc("""
        {{< tabpane text=true >}}

        {{% tab header="Maven (`pom.xml`)" lang=Maven %}}

        ```xml
        <dependency/>
        ```

        {{% /tab %}} {{% tab Gradle %}}

        ```kotlin
        implementation("x")
        ```

        {{% /tab %}} {{< /tabpane >}}
        """)
    blocks = clean_page(body)
    assert [(b.kind, b.text) for b in blocks] == [
        ("paragraph", "Maven (pom.xml):"),
        ("code", "```xml\n<dependency/>\n```"),
        ("paragraph", "Gradle:"),
        ("code", '```kotlin\nimplementation("x")\n```'),
    ]


def test_multi_line_call_and_media_arguments():
    body = doc("""
        Look:

        {{< figure
          src="/images/zion.jpg"
          alt="A photograph of Zion"
          caption="Zion National Park"
        >}}

        {{< youtube id="abc" title="Intro video" >}} {{< img src="x.png" >}}

        [{{< img src="cover.png" alt="Book cover" >}}](https://example.com/book/)
        """)
    assert texts(clean_page(body)) == [
        "Look:",
        "Zion National Park\nA photograph of Zion",
        "Intro video",
        "Book cover",
    ]


def test_comment_pairs_are_dropped():
    body = doc("""
        Before. {{< comment >}} cSpell:disable {{< /comment >}}

        {{% comment %}}
        Notes for editors only.

        ```sh
        hidden
        ```
        {{% /comment %}}

        After.
        """)
    blocks = clean_page(body)
    assert texts(blocks) == ["Before.", "After."]


def test_code_toggle_becomes_a_code_block():
    body = doc("""
        Configure it:

        {{< code-toggle file=hugo >}}
        [[module.mounts]]
        source = 'assets'
        {{< / code-toggle >}}

        {{< code-toggle file=content/x.md fm=true >}}
        title: Example
        {{< /code-toggle >}}

        {{< code-toggle config=server />}}
        """)
    blocks = clean_page(body)
    assert [(b.kind, b.text) for b in blocks] == [
        ("paragraph", "Configure it:"),
        ("code", "```toml {file=\"hugo\"}\n[[module.mounts]]\nsource = 'assets'\n```"),
        ("code", '```yaml {file="content/x.md"}\ntitle: Example\n```'),
    ]


def test_include_is_resolved_cleaned_and_inlined():
    snippets = {
        "/_common/intro.md": (
            '---\n---\n\n## Shared heading\n\nShared **text** {{% include "/_common/deep.md" %}}\n'
        ),
        "/_common/deep.md": "Deep text.\n\n```sh\nls\n```\n",
        "docs/languages/index-intro": "Welcome to {{ $name }} docs.\n",
    }
    calls = []

    def resolver(path: str) -> str | None:
        calls.append(path)
        return snippets.get(path)

    body = doc("""
        # Page

        {{% include "/_common/intro.md" %}}

        {{% docs/languages/index-intro go /%}}

        {{% include "/_common/missing.md" %}}

        Last.
        """)
    blocks = clean_page(body, include_resolver=resolver)
    assert [(b.kind, b.text) for b in blocks] == [
        ("heading", "Page"),
        ("heading", "Shared heading"),
        ("paragraph", "Shared text"),
        ("paragraph", "Deep text."),
        ("code", "```sh\nls\n```"),
        ("paragraph", "Welcome to docs."),
        ("paragraph", "Last."),
    ]
    assert calls == [
        "/_common/intro.md",
        "/_common/deep.md",
        "docs/languages/index-intro",
        "/_common/missing.md",
    ]


def test_path_named_partial_is_found_in_includes_folders_by_its_tail():
    # OpenTelemetry's `docs/languages/exporters/intro` shortcode includes
    # `_includes/exporters/intro.md` from the page's folder upwards.
    snippets = {
        "_includes/exporters/intro": "Export to the Collector.\n",
        "_includes/intro": "The wrong, shorter tail.\n",
    }
    calls = []

    def resolver(path: str) -> str | None:
        calls.append(path)
        return snippets.get(path)

    blocks = clean_page("{{% docs/languages/exporters/intro %}}\n", include_resolver=resolver)
    assert texts(blocks) == ["Export to the Collector."]
    assert calls == [
        "docs/languages/exporters/intro",
        "_includes/languages/exporters/intro",
        "_includes/exporters/intro",
    ]


def test_include_fills_the_snippet_template_outside_code():
    snippet = doc("""
        ---
        ---
        ## Keeping {{ $1 }} information current

        The [interface]({{ $2 }}) of the {{ $name }} SDK, `{{ $name }}` in code stays.

        {{ if $name }}
        A list for the language.
        {{ end }}

        {{ if not $name }}
        A list for every language.
        {{ end }}

        {{ if $empty }}
        Never shown.
        {{ end }}

        ```go-html-template
        {{ $name := "x" }}{{ $1 }}
        ```
        """)
    blocks = clean_page(
        '{{% include "k.md" vendor "https://x.y/" empty="" %}}\n',
        include_resolver=lambda path: snippet,
    )
    assert [(b.kind, b.text) for b in blocks] == [
        ("heading", "Keeping vendor information current"),
        ("paragraph", "The interface of the SDK, {{ $name }} in code stays."),
        ("paragraph", "A list for the language."),
        ("code", '```go-html-template\n{{ $name := "x" }}vendor\n```'),
    ]


def test_config_option_shows_the_property_and_its_environment_variable():
    body = doc("""
        {{% config_option name="otel.instrumentation.common.db-statement-sanitizer.enabled" default=true %}}
        Enables the DB statement sanitization.
        {{% /config_option %}}
        """)
    assert texts(clean_page(body)) == [
        "System property: otel.instrumentation.common.db-statement-sanitizer.enabled\n"
        "Environment variable: OTEL_INSTRUMENTATION_COMMON_DB_STATEMENT_SANITIZER_ENABLED\n"
        "Default: true",
        "Enables the DB statement sanitization.",
    ]


def test_include_without_resolver_is_dropped():
    assert texts(clean_page('A {{% include "/_common/x.md" %}} B\n')) == ["A B"]


def test_include_recursion_and_depth_are_bounded():
    def self_including(path: str) -> str:
        return f'Text of {path}. {{{{% include "{path}" %}}}}'

    with capture_logs() as logs:
        blocks = clean_page('{{% include "a" %}}', include_resolver=self_including)
    assert prose(blocks) == "Text of a."
    assert any(e["event"] == "include_skipped" for e in logs)

    def chain(path: str) -> str:  # a -> aa -> aaa -> ... never repeats a path
        return f'Level {len(path)}. {{{{% include "{path}a" %}}}}'

    blocks = clean_page('{{% include "a" %}}', include_resolver=chain)
    assert prose(blocks) == "Level 1.\nLevel 2.\nLevel 3."


def test_param_outside_code_and_other_known_shortcodes():
    body = doc("""
        Version {{% param vers %}}, missing {{% param other %}}.
        A {{% glossary-term "page bundle" %}} links to {{% eturl figure %}}.
        Since {{< new-in 0.120.0 />}} and {{< new-in v0.159.2 />}}
        but {{<deprecated-in 0.158.0 />}}.
        Unknown {{< render-list-of-pages-in-section >}} gone.
        """)
    assert prose(clean_page(body, params={"vers": "1.2"})) == (
        "Version 1.2, missing other.\nA page bundle links to figure.\n"
        "Since New in v0.120.0 and New in v0.159.2\nbut Deprecated in v0.158.0.\n"
        "Unknown gone."
    )


def test_paired_deprecated_in_keeps_its_text():
    body = (
        "{{< deprecated-in 0.155.0 >}}\nUse the [`Meta`](#meta) method instead.\n"
        "{{< /deprecated-in >}}\n"
    )
    assert texts(clean_page(body)) == ["Deprecated in v0.155.0.\nUse the Meta method instead."]


def test_mismatched_close_keeps_inner_text():
    body = doc("""
        {{% blocks/lead color="dark" %}}
        Lead text.
        {{% /blocks/lead %}}

        {{% blocks/section color="white" %}}
        Section text.
        {{% /blocks/lead %}}

        {{< blocks/section >}}
        More.
        {{< /blocks/section >}}
        """)
    out = prose(clean_page(body))
    assert out == "Lead text.\nSection text.\nMore."
    assert "{{" not in out


def test_alert_and_details_shortcodes_label_their_content():
    body = (
        '{{% alert title="Note" %}}\nMind the gap.\n{{% /alert %}}\n\n'
        '{{< details summary="See the details" >}}\nHidden.\n{{< /details >}}\n'
    )
    assert texts(clean_page(body)) == ["Note:\nMind the gap.", "See the details:\nHidden."]


def test_unterminated_shortcode_is_left_as_text():
    assert prose(clean_page("Broken {{< foo and text\n")) == "Broken {{< foo and text"


# --- HTML -------------------------------------------------------------------------------


def test_details_summary_and_br():
    body = doc("""
        <details>
        <summary class="mb-3">View schedule</summary>

        - **Keynote**<br>by Ann<br> 9:00
        </details>
        """)
    assert texts(clean_page(body)) == ["View schedule", "Keynote\nby Ann\n9:00"]


def test_br_in_table_cells_and_table_rows():
    body = doc("""
        | Name | Notes |
        | ---- | :---: |
        | `a\\|b` | first<br>second |
        | [link](/x/) | *em* |
        """)
    assert texts(clean_page(body)) == ["Name | Notes\na|b | first second\nlink | em"]


def test_script_style_comments_and_code_excerpt_dropped():
    body = doc("""
        <?code-excerpt "src/main/java/Init.java"?>
        <!-- prettier-ignore-start -->
        Visible <span class="x">words</span> and <a href="/y">a link</a>.
        <!--
        multi-line

        comment
        -->
        <script>
        var hidden = 1;

        document.write("no");
        </script>
        <style>.x { color: red }</style>
        Kept `<!-- toc -->` and `<div>` in code, and <secret> placeholders.
        """)
    assert texts(clean_page(body)) == [
        "Visible words and a link.",
        "Kept <!-- toc --> and <div> in code, and <secret> placeholders.",
    ]


def test_html_entities_and_autolinks():
    body = "Fish &amp; chips &lt;3, see <https://example.com/a_b_c>.\n"
    assert prose(clean_page(body)) == "Fish & chips <3, see https://example.com/a_b_c."


def test_raw_html_table():
    body = (
        "<table>\n  <tr>\n    <th>CVE</th>\n    <th>Fixed</th>\n  </tr>\n"
        "  <tr><td>2024-1</td><td>1.2</td></tr>\n</table>\n"
    )
    assert prose(clean_page(body)) == "CVE | Fixed\n2024-1 | 1.2"


# --- Markdown -------------------------------------------------------------------------------


def test_headings_atx_setext_and_attributes():
    body = doc("""
        # Title with `code` {#custom-id}

        Setext one
        ==========

        Setext two
        ----------

        ### Closed ### 

        #hashtag is text
        """)
    blocks = clean_page(body)
    assert [(b.kind, b.text, b.level) for b in blocks] == [
        ("heading", "Title with code", 1),
        ("heading", "Setext one", 1),
        ("heading", "Setext two", 2),
        ("heading", "Closed", 3),
        ("paragraph", "#hashtag is text", 0),
    ]


def test_links_images_references_and_emphasis():
    body = doc("""
        See [the docs](https://x.y/a_(b)) and ![Alt text](/i.png "t"), [ref link][r],
        [collapsed][], [shortcut], [not a ref] and [`where`](/functions/where/).
        **Bold**, __strong__, *em*, _under_, ~~gone~~, snake_case_name, 2 * 3 * 4, `**/*.md`.
        Escaped \\*stars\\* stay.

        [![OTCA badge]][otca]
        {.badge--otca .w-75}

        [r]: https://example.com/r
        [collapsed]: /c/
        [otca]: https://example.com/otca
        [shortcut]:
          <https://example.com/s>
        """)
    assert texts(clean_page(body)) == [
        "See the docs and Alt text, ref link,\ncollapsed, shortcut, [not a ref] and where.\n"
        "Bold, strong, em, under, gone, snake_case_name, 2 * 3 * 4, **/*.md.\n"
        "Escaped *stars* stay.",
        "OTCA badge",
    ]


def test_emphasis_across_a_wrapped_line_and_in_an_alert_title():
    body = doc("""
        Coming to **Tokyo,
        June 16-17** and _you just
        need_ it; snake_case_name
        and other_name stay.

        > [!WARNING] **First time contributors** take note!
        > Read this.
        """)
    assert texts(clean_page(body)) == [
        "Coming to Tokyo,\nJune 16-17 and you just\nneed it; snake_case_name\nand other_name stay.",
        "Warning: First time contributors take note! Read this.",
    ]


def test_shortcut_references_match_labels_as_commonmark_does():
    # The use's inline code is already text when it is matched; case and spacing do not count.
    body = doc("""
        Use the [`resources.GetRemote`] function, see [Cache  Busting] and [`a`  b].
        Not defined: [`other`]. Before a code block, write a [render hook]:

        [`resources.GetRemote`]: /functions/resources/getremote/
        [cache busting]: /configuration/build/#cache-busters
        [`a` b]: /ab/
        [render hook]:
          /render-hooks/
        """)
    assert texts(clean_page(body)) == [
        "Use the resources.GetRemote function, see Cache Busting and a b.\n"
        "Not defined: [other]. Before a code block, write a render hook:",
    ]


def test_lists_quotes_alerts_definition_lists_footnotes():
    body = doc("""
        - one
        - [x] two
          continued
        1. three

        > Quoted
        > text.

        > [!WARNING]
        > Careful here.

        `SLICE`
        : (`[]any`) A slice.

        Claim.[^1]

        [^1]: The footnote text.
        """)
    assert texts(clean_page(body)) == [
        "one\ntwo\ncontinued\nthree",
        "Quoted\ntext.",
        "Warning: Careful here.",
        "SLICE\n([]any) A slice.",
        "Claim.",
        "The footnote text.",
    ]


def test_thematic_breaks_and_paragraph_splitting():
    blocks = clean_page("First para\nline two.\n\n---\n\n***\n\nSecond :smile:\n")
    assert texts(blocks) == ["First para\nline two.", "Second :smile:"]


# --- robustness and over-cleaning --------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "",
        "\n\n",
        "{{<",
        "{{< >}}",
        "{{% /%}}",
        "{{</* unterminated",
        "```",
        "~~~\n",
        "<!--",
        "<div",
        "[",
        "[x]:",
        "![](",
        "`",
        "``",
        "> ",
        ">>> [!NOTE]",
        "|",
        "| --- |",
        "<<<>>>",
        "#",
        "######## seven",
        "\\",
        "\ue000999\ue001 stray placeholder",
        "{{< tab >}}{{< /tab >}}",
        "<script>never closed",
        "&#xZZ; &bogus;",
        "- \n* \n1. ",
        "=\n-\n",
    ],
)
def test_never_raises_and_never_falls_back(body):
    with capture_logs() as logs:
        blocks = clean_page(body)
    assert all(isinstance(b, Block) for b in blocks)
    assert not [e for e in logs if e["event"] == "clean_failed"]


def test_stray_placeholder_characters_in_source_survive():
    assert prose(clean_page("a \ue000999\ue001 b")) == "a \ue000999\ue001 b"


def test_over_cleaning_is_reported():
    hidden = " ".join(f"word{i} lorem ipsum" for i in range(60))
    body = f"Short visible line.\n\n{{{{< comment >}}}}\n{hidden}\n{{{{< /comment >}}}}\n"
    with capture_logs() as logs:
        blocks = clean_page(body, path="content/en/x.md")
    assert texts(blocks) == ["Short visible line."]
    [event] = [e for e in logs if e["event"] == "over_cleaned"]
    assert event["log_level"] == "warning" and event["path"] == "content/en/x.md"
    assert event["ratio"] < 0.3
    assert cleaned_ratio(body, blocks) < 0.05


def test_normal_page_is_not_over_cleaned():
    para = " ".join(["The collector receives [spans](/docs/spans/) and **metrics**."] * 20)
    body = f"# Title\n\n{para}\n\n```yaml\nreceivers: {{}}\n```\n\n<!-- editor note -->\n"
    with capture_logs() as logs:
        blocks = clean_page(body)
    assert not [e for e in logs if e["event"] == "over_cleaned"]
    assert cleaned_ratio(body, blocks) == pytest.approx(1.0)


def test_blocks_to_text():
    blocks = clean_page("## Head\n\nPara.\n\n```\nx\n```\n")
    assert blocks_to_text(blocks) == "## Head\n\nPara.\n\n```\nx\n```"
