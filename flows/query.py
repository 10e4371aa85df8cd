"""The query flow: one ad-hoc search, with its metrics recorded as an artifact and in the
metrics store (so `hetriever metrics` can report p50/p95 over recent queries), and the search
analytics report (`hetriever analytics`) published as the `search-analytics` artifact; with
the analytics setting on, the search is recorded there too (once: its warm run).

Every query run is a fresh process: opening the store and loading the model take far longer
than a search. The flow pays that start-up with a warm-up search first and reports it apart, so
the recorded latency is the search's own, comparable with a long-lived server's; the warm-up
is recorded as the source's cold search."""

from __future__ import annotations

import time

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

from flows.analytics_markdown import analytics_markdown
from flows.query_report import result_lines, results_markdown
from flows.run_logs import prefect_run_logging
from hetriever.core.config import load_settings
from hetriever.core.logs import watch_safe
from hetriever.core.names import as_given, require_known, validate_collection_name
from hetriever.search.analytics import QueryRecord, record_quietly
from hetriever.search.analytics_report import analytics_report
from hetriever.search.hybrid import retrieve
from hetriever.search.metrics import QueryMetric, metrics_store
from hetriever.search.published import links_of
from hetriever.search.request import SearchRequest
from hetriever.store.knowledge_store import get_knowledge_store

SOURCE = "query-flow"  # as `hetriever metrics --source` names it


@flow(name="query", log_prints=True)
async def query(
    query: str,
    repositories: list[str] | None = None,
    top_k: int = 5,
    filters: dict | None = None,
    hybrid: bool | None = None,
    access_levels: list[str] | None = None,
    group_by: str | None = None,
    lang: str | None = None,
    version: str | None = None,
) -> dict:
    """One search. `access_levels`: what the caller may see (default PUBLIC only);
    `group_by`: "page" (one result per page, the default) or "chunk"; `lang`: a language
    code or "all" (default: each multilingual site's default language); `version`: a
    version label, or "all" (default: each repository's checked-out tree)."""
    logger = get_run_logger()
    settings = load_settings()
    with prefect_run_logging(settings.log_level, settings.log_format):
        started = time.perf_counter()
        store = get_knowledge_store(settings)
        repositories = as_given(repositories)  # `opentelemetry.io` for opentelemetry-io
        for name in repositories or []:
            validate_collection_name(name)  # a malformed name says so, before "unknown"
        require_known(repositories, store.repository_names())

        # The flow's parameters are its deployment's interface; inside, one request.
        request = SearchRequest(
            query,
            top_k,
            filters,
            repositories=repositories,
            hybrid=hybrid,
            access_levels=access_levels,
            group_by=group_by,
            lang=lang,
            version=version,
        )

        async def search():
            return await retrieve(store, request)

        first = await search()  # warm-up: store, model, BM25 index loaded in this process
        startup_ms = 1000 * (time.perf_counter() - started)
        result = await search()
    metric = QueryMetric.from_result(result, repositories, source=SOURCE, cold=False)
    metrics = metrics_store(settings.resolved_state_dir)
    try:  # the warm-up is recorded too, as the cold search it is
        metrics.record_many(
            [QueryMetric.from_result(first, repositories, source=SOURCE, cold=True), metric]
        )
        by_source = metrics.summary(last=1000).by_source
    finally:
        metrics.close()
    logger.info(
        "query %s: %d results in %.1f ms (%s, %s); process start-up %.0f ms",
        watch_safe(repr(query[:80])),
        result.total_results,
        result.search_time_ms,
        result.mode,
        result.retriever_counts,
        startup_ms,
    )
    await acreate_table_artifact(
        key="query-metrics",
        table=[
            {"metric": "search latency ms (warm)", "value": round(result.search_time_ms, 2)},
            {"metric": "start-up ms (store, model, first search)", "value": round(startup_ms, 1)},
            {"metric": "mode", "value": result.mode},
            {"metric": "results", "value": result.total_results},
            {
                "metric": "top score",
                "value": None if metric.top_score is None else round(metric.top_score, 2),
            },
            *[
                {"metric": f"{name} candidates", "value": count}
                for name, count in result.retriever_counts.items()
            ],
        ],
        description=f"Metrics of the query {query[:80]!r}",
    )
    await acreate_table_artifact(
        key="query-latency-by-source",
        table=by_source or [{"source": "", "count": 0}],
        description="Search latency over the newest 1,000 recorded queries, by source (cli, "
        "query-flow, http, mcp) and temperature (cold: a process's first search, "
        "start-up included)",
    )
    if settings.analytics:
        record_quietly(
            settings, QueryRecord.of(result, repositories=repositories, source=SOURCE, cold=False)
        )
    await acreate_markdown_artifact(
        key="search-analytics",
        markdown=analytics_markdown(analytics_report(settings)),
        description="What readers asked, found nothing for and opened (hetriever analytics)",
    )
    links = links_of(store.catalog, result.matches, settings.site_urls, settings.content_dir)
    for line in result_lines(result, links):  # what `prefect deployment run --watch` shows
        logger.info("%s", line)
    await acreate_markdown_artifact(
        key="query-results",
        markdown=results_markdown(result, links),
        description=f"Results of the query {query[:80]!r}",
    )
    answer = result.to_dict()
    for match, link in zip(answer["matches"], links):
        match["link"] = link  # as the HTTP API's and `hetriever search --json`'s
    return {**answer, "startup_ms": round(startup_ms, 1)}
