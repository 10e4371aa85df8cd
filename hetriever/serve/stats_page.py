"""`/stats`: the search analytics report as one HTML page, its charts inline SVG.

Rendered on the server from `AnalyticsReport`: no script, no stylesheet or font from
anywhere (the page's Content-Security-Policy allows none, and inline styles only). Every text
from a query or a URL goes through `html.escape`, so a query holding `<script>` shows as
those characters. Each chart is `<svg class="chart" id="chart-...">` and each bar a `<rect
class="bar ...">` with its value in `data-value`, so a test can find them.
"""

from __future__ import annotations

from html import escape
from typing import Any

from hetriever.search.analytics_report import AnalyticsReport

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",  # the queries of others: never kept by a proxy
    "Referrer-Policy": "no-referrer",
}
LABEL_CHARS = 48  # of a query shown beside its bar (the whole text in its tooltip)
WIDTH = 720

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem auto;max-width:60rem;color:#222}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{padding:.2rem .6rem;text-align:left;
border-bottom:1px solid #ddd;vertical-align:top}td.n{text-align:right}
.note{color:#555}.chart text{font:12px system-ui,sans-serif;fill:#333}
.bar.found{fill:#4a7ebb}.bar.weak{fill:#e0a030}.bar.no-result{fill:#c8453a}
.bar.count{fill:#4a7ebb}.bar.p50{fill:#4a7ebb}.bar.p95{fill:#9bb7dc}
code{white-space:pre-wrap;word-break:break-all}
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def per_day_chart(days: list[dict[str, Any]]) -> str:
    """Queries per day, each bar split into found, weak and no result."""
    if not days:
        return '<p class="note">No query recorded in this window.</p>'
    height, top, bottom = 180, 16, 40
    most = max(d["queries"] for d in days) or 1
    step = max(8.0, min(48.0, (WIDTH - 40) / len(days)))
    width = max(int(40 + step * len(days)), 340)  # room for the legend under a few days
    scale = (height - top - bottom) / most
    parts = [
        f'<svg class="chart" id="chart-per-day" role="img" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" '
        f'aria-label="queries per day">',
        f'<text x="0" y="12">{most} queries</text>',
    ]
    base = height - bottom
    for i, day in enumerate(days):
        x = 40 + i * step
        y = float(base)
        found = day["queries"] - day["weak"] - day["no_result"]
        parts.append(
            f'<g class="day" data-day="{_e(day["day"])}"><title>{_e(day["day"])}: '
            f"{day['queries']} queries, {day['no_result']} without a result, "
            f"{day['weak']} weak</title>"
        )
        for kind, value in (
            ("found", found),
            ("weak", day["weak"]),
            ("no-result", day["no_result"]),
        ):
            if value <= 0:
                continue
            h = value * scale
            y -= h
            parts.append(
                f'<rect class="bar {kind}" data-value="{value}" x="{x:.1f}" '
                f'y="{y:.1f}" width="{step * 0.8:.1f}" height="{h:.1f}"/>'
            )
        parts.append("</g>")
        if len(days) <= 14 or i % max(1, len(days) // 10) == 0:
            parts.append(f'<text x="{x:.1f}" y="{base + 14}">{_e(day["day"][5:])}</text>')
    parts.append(
        f'<text x="40" y="{height - 6}">found (blue), weak (amber), no result (red)</text></svg>'
    )
    return "".join(parts)


def bar_chart(
    chart_id: str,
    rows: list[tuple[str, float, str]],
    kind: str = "count",
    unit: str = "",
    kinds: list[str] | None = None,
) -> str:
    """Horizontal bars, (label, value, tooltip) each, in the order given; `kinds`: each
    bar's class (else `kind`)."""
    if not rows:
        return '<p class="note">None.</p>'
    row_h, label_w = 22, 330
    height = row_h * len(rows) + 8
    most = max(v for _, v, _ in rows) or 1
    span = WIDTH - label_w - 80
    parts = [
        f'<svg class="chart" id="{_e(chart_id)}" role="img" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}">'
    ]
    for i, (label, value, tip) in enumerate(rows):
        y = 4 + i * row_h
        w = max(1.0, value / most * span)
        parts.append(
            f'<g class="row"><title>{_e(tip)}</title>'
            f'<text x="0" y="{y + 15}">{_e(_short(label))}</text>'
            f'<rect class="bar {_e(kinds[i] if kinds else kind)}" '
            f'data-value="{value:g}" x="{label_w}" y="{y + 3}" width="{w:.1f}" '
            f'height="{row_h - 6}"/>'
            f'<text x="{label_w + w + 6:.1f}" y="{y + 15}">{value:g}{_e(unit)}</text>'
            f"</g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def latency_chart(latency: list[dict[str, Any]], temperature: str) -> str:
    """p50 and p95 per source of one temperature, as pairs of bars (cold and warm apart:
    on one scale a 12 ms bar beside a second of start-up is not seen)."""
    rows, kinds = [], []
    for row in latency:
        if row["temperature"] != temperature:
            continue
        name = f"{row['source']} ({row['count']} queries)"
        for q in ("p50", "p95"):
            value = row[f"{q}_ms"]
            rows.append((f"{name} {q}", value, f"{name}: {q} {value} ms"))
            kinds.append(q)
    return bar_chart(f"chart-latency-{temperature}", rows, unit=" ms", kinds=kinds)


def table(headers: tuple[str, ...], rows: list[tuple[Any, ...]], table_id: str) -> str:
    if not rows:
        return f'<p class="note" id="{_e(table_id)}">None.</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{_e(c)}</td>'
            if isinstance(c, (int, float))
            else f"<td><code>{_e(c)}</code></td>"
            for c in row
        )
        + "</tr>"
        for row in rows
    )
    return f'<table id="{_e(table_id)}"><tr>{head}</tr>{body}</table>'


def render(report: AnalyticsReport) -> str:
    state = (
        ""
        if report.enabled
        else '<p class="note" id="analytics-off">Search analytics is off: nothing new is '
        "recorded (set <code>HETRIEVER_ANALYTICS=true</code> and restart).</p>"
    )
    sections = [
        ("Queries per day", per_day_chart(report.per_day)),
        (
            "Most asked",
            bar_chart(
                "chart-top-queries",
                [
                    (
                        q["query"],
                        q["count"],
                        f"{q['query']}: {q['count']} times, {q['no_result']} "
                        f"without a result, {q['weak']} weak",
                    )
                    for q in report.top_queries
                ],
            ),
        ),
        (
            "Found nothing",
            bar_chart(
                "chart-no-result",
                [
                    (
                        q["query"],
                        q["count"],
                        f"{q['query']}: {q['count']} times, last {q['last']}, "
                        f"in {', '.join(q['scope'])}",
                    )
                    for q in report.no_result
                ],
                "no-result",
            ),
        ),
        (
            f"Found only weak results (nearest similarity under {report.weak_below:g})",
            table(
                ("query", "times", "nearest similarity"),
                [(q["query"], q["count"], q["similarity"]) for q in report.weak],
                "weak",
            ),
        ),
        (
            "Results nobody opened (HTTP searches)",
            table(
                ("query", "times"), [(q["query"], q["count"]) for q in report.unopened], "unopened"
            ),
        ),
        (
            "Results readers opened",
            table(
                ("query", "rank", "url", "times"),
                [(o["query"], o["rank"], o["url"], o["count"]) for o in report.opens],
                "opens",
            ),
        ),
        ("Latency of warm searches, by source", latency_chart(report.latency, "warm")),
        (
            "Latency of cold searches (a process's first, start-up included), by source",
            latency_chart(report.latency, "cold"),
        ),
    ]
    body = "".join(f"<h2>{_e(title)}</h2>{content}" for title, content in sections)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>hetriever search analytics</title><style>{STYLE}</style></head><body>"
        f"<h1>Search analytics</h1>{state}"
        f'<p class="note" id="summary">{report.queries} queries over the last '
        f"{report.days:g} days (kept {report.retention_days} days), "
        f"{report.opened} with a result opened.</p>"
        f'<form method="get" action="/stats"><label>days <input name="days" type="number" '
        f'min="1" max="3650" value="{report.days:g}"></label> <button>show</button></form>'
        f"{body}</body></html>"
    )
