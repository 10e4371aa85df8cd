"""Logging imports structlog only when a line is written: a process that writes none (a quiet
search at the prompt) never pays for it, and the first line written is rendered as configured.
Each case runs in a fresh interpreter, where nothing has imported structlog yet."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _run(code: str) -> tuple[dict, str]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_lines_below_the_level_never_import_structlog_and_the_first_line_is_configured():
    found, stderr = _run("""
        import json, sys
        from hetriever.core.logs import configure_logging, get_logger
        configure_logging("WARNING", "json")
        log = get_logger("hetriever.test", repository="docs")
        log.debug("not_written")
        log.info("not_written_either", path="a.md")
        quiet = "structlog" not in sys.modules
        log.bind(path="b.md").warning("written", reason="why")
        print(json.dumps({"quiet": quiet, "loaded": "structlog" in sys.modules}))
    """)
    assert found == {"quiet": True, "loaded": True}
    (line,) = stderr.strip().splitlines()
    event = json.loads(line)
    assert event["event"] == "written" and event["level"] == "warning"
    assert (event["repository"], event["path"], event["reason"]) == ("docs", "b.md", "why")


def test_a_later_configuration_takes_over_before_the_first_line():
    found, stderr = _run("""
        import json, sys
        from hetriever.core.logs import configure_logging, get_logger
        log = get_logger("hetriever.test")
        configure_logging("ERROR", "json")
        log.warning("below_the_new_level")
        configure_logging("DEBUG", "json")
        log.debug("now_written")
        print(json.dumps({"loaded": "structlog" in sys.modules}))
    """)
    assert found == {"loaded": True}
    assert [json.loads(line)["event"] for line in stderr.strip().splitlines()] == ["now_written"]
