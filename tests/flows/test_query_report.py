"""The query flow's results as a person reads them: the `query-results` artifact (title linked
to the published page at its heading, heading path, passage, rounded scores; docs text escaped,
never markup that runs) and the top results in the run's log (what `--watch` shows).

Logic first, then the real flow in the Prefect harness over a real index."""

from __future__ import annotations

import asyncio
import re

import pytest

from flows.query_report import link_target, markdown_text
from hetriever.discover.repositories import discover_repositories
from hetriever.store.knowledge_store import clear_store_cache
from tests.support.helpers import commit_all, init_repo, write_files

HOSTILE = (
    "Run <script>alert(1)</script> then [click](javascript:alert(2)) | a cell | "
    "and `code` ** bold ** # heading"
)


def test_markdown_text_leaves_no_markup_standing():
    text = markdown_text(HOSTILE)
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "](javascript" not in text and "\\]\\(javascript" in text
    assert "|" not in text.replace("\\|", "")  # every pipe escaped: no table cell ends
    assert "`" not in text.replace("\\`", "")
    assert "**" not in text.replace("\\*", "")
    # what a reader sees, once a renderer drops the escapes
    assert re.sub(r"\\(.)", r"\1", text) == HOSTILE.replace("<", "&lt;").replace(">", "&gt;")


def test_control_characters_are_shown_not_sent():
    assert markdown_text("a\x1b[31mb\x07") == "a\\\\x1b\\[31mb\\\\x07"


def test_only_http_addresses_become_links_and_cannot_end_the_link_early():
    assert link_target("javascript:alert(1)") == ""
    assert link_target("/docs/where/") == ""
    assert link_target("https://docs.example.org/a (b)/") == "https://docs.example.org/a%20%28b%29/"
    assert (
        link_target("https://docs.example.org/docs/x/#install-it")
        == "https://docs.example.org/docs/x/#install-it"
    )


PAGES = {
    "hugo.toml": 'baseURL = "https://docs.example.org/"\ntitle = "Hostile"\n',
    "content/docs/pipes.md": (
        '---\ntitle: "Pipes | and <b>tags</b> type[/name]"\n---\n\n'
        "## Wombat settings\n\n"
        "Wombat burrows, as the example shows (fenced code is kept as written):\n\n"
        f"```text\n{HOSTILE}\n```\n\nThe wombat passage goes on about burrows and tunnels.\n"
    ),
    "content/docs/other.md": "---\ntitle: Other page\n---\n\nNothing about that animal.\n",
}


@pytest.fixture
def hostile_index(tmp_path, monkeypatch, minilm_model_dir, prefect_harness):
    from hetriever.commands.ingest import ingest_local
    from hetriever.core.config import load_settings

    repo = init_repo(tmp_path / "docs" / "hostile-docs")
    write_files(repo, PAGES)
    commit_all(repo)
    for key, value in {
        "HETRIEVER_DOCS_ROOT": tmp_path / "docs",
        "HETRIEVER_CHROMA_PATH": tmp_path / "chroma",
        "HETRIEVER_STATE_DIR": tmp_path / "state",
        "HETRIEVER_MODEL_DIR": minilm_model_dir,
    }.items():
        monkeypatch.setenv(key, str(value))
    clear_store_cache()
    settings = load_settings()
    repos = discover_repositories(settings.docs_root)
    (outcome,) = asyncio.run(ingest_local(settings, repos, False, show_progress=False))
    assert outcome["ok"], outcome
    yield
    clear_store_cache()


@pytest.mark.prefect
def test_the_query_flow_shows_linked_escaped_results_in_its_artifact_and_log(hostile_index):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.logging.handlers import APILogHandler

    from flows.query import query

    state = asyncio.run(query("wombat burrows settings", top_k=2, return_state=True))
    assert state.is_completed(), state.message
    answer = state.result()
    assert answer["matches"][0]["link"] == "https://docs.example.org/docs/pipes/"
    run_id = state.state_details.flow_run_id
    asyncio.run(APILogHandler.aflush())

    async def read():
        async with get_client() as client:
            artifacts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=["query-results"]),
                    flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]),
                )
            )
            logs = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])), limit=200
            )
            return artifacts, logs

    artifacts, logs = asyncio.run(read())
    (artifact,) = artifacts
    page = artifact.data
    # the title links to the published page at its heading's anchor
    assert (
        "## 1. [Pipes \\| and &lt;b&gt;tags&lt;/b&gt; type\\[/name\\]]"
        "(https://docs.example.org/docs/pipes/#wombat-settings)"
    ) in page, page
    assert "Section: Wombat settings" in page
    # the passage, as text: no live tag, link, cell break or code span from the docs
    (quote,) = [line for line in page.splitlines() if line.startswith("> Wombat burrows")]
    assert "<script>" not in page, page
    assert "&lt;script&gt;alert\\(1\\)&lt;/script&gt;" in quote, quote
    assert "](javascript" not in page
    assert "|" not in quote.replace("\\|", "") and "`" not in quote.replace("\\`", "")
    # scores rounded
    (where,) = [line for line in page.splitlines() if "score " in line][:1]
    assert re.search(r"score \d\.\d\d \(", where) and not re.search(r"\d\.\d{3}", page), page

    # the run's log as `prefect deployment run --watch` prints it (Prefect's own formatter,
    # whose lines Rich reads as markup): the top results, as written
    import io

    from prefect.cli.flow_runs_watching import FlowRunFormatter
    from rich.console import Console

    screen = io.StringIO()
    console, formatter = Console(file=screen, width=300), FlowRunFormatter()
    for log in sorted(logs, key=lambda log: log.timestamp):
        console.print(formatter.format(log))
    watched = screen.getvalue().splitlines()
    top = [line for line in watched if " 1. Pipes" in line]
    assert top and "Pipes | and <b>tags</b> type[/name] > Wombat settings  0." in top[0], watched
    assert top[0].endswith("https://docs.example.org/docs/pipes/#wombat-settings")
    assert any(" 2. Other page" in line for line in watched)
