"""The ingest run's pages quote the docs (file paths, errors, skip reasons): as text, never
Markdown or HTML that renders or runs."""

from __future__ import annotations

import re

from flows.artifacts import repository_markdown, skipped_markdown, summary_markdown
from hetriever.core.models import IndexResult, SkippedFile

PATH = "content/a`b<script>alert(1)</script>|x.md"
REASON = "front matter [x](javascript:alert(1)) <img src=x onerror=alert(2)> `code` | cell"


def result() -> IndexResult:
    return IndexResult(
        repository="hostile-docs",
        mode="full",
        old_commit=None,
        new_commit="c" * 40,
        failed=[SkippedFile(PATH, REASON)],
        skipped=[SkippedFile(PATH, REASON)],
        completed=False,
    )


def cells(line: str) -> int:
    """Unescaped pipes in a table row: one more than its cells."""
    return len(re.findall(r"(?<!\\)\|", line))


def test_paths_and_errors_are_text_in_the_repository_page_and_the_skipped_list():
    for page in (repository_markdown(result(), runs=[]), skipped_markdown(result())):
        # a code span is literal (HTML too); outside one, no tag and no link
        outside = page.replace("``content/a`b<script>alert(1)</script>\\|x.md``", "")
        assert "<" not in outside and not re.search(r"(?<!\\)\]\(", outside), page
        (row,) = [line for line in page.splitlines() if "alert(1)" in line and "|" in line]
        assert cells(row) == 3, row  # | file | error |: no cell break from the docs
        assert "``content/a`b<script>alert(1)</script>\\|x.md``" in row  # a literal code span
        assert "\\[x\\](javascript:alert(1)) &lt;img src=x onerror=alert(2)&gt; \\`code\\`" in row


def test_a_failed_repository_s_error_is_text_in_the_summary():
    summary = summary_markdown(
        [{"repository": "hostile-docs", "ok": False, "error": f"{PATH}: {REASON}"}]
    )
    (row,) = [line for line in summary.splitlines() if line.startswith("| hostile-docs")]
    assert "<" not in row and not re.search(r"(?<!\\)\]\(", row), row
    assert "&lt;script&gt;" in row
    assert cells(row) == 12, row  # 11 columns
