"""The configuration reference, docs/configuration.md, written from `Settings` itself.

`python -m hetriever.core.config_reference` writes it; `--check` exits 1 when the file is not
what the settings give (tests/core/test_config_reference.py checks the same), so a setting
added, renamed or redescribed without the reference fails the tests.
"""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo

from hetriever.core.config import ENV_PREFIX, Settings, WebhookSettings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
REGENERATE = "python -m hetriever.core.config_reference"

# Groups of Settings in declaration order: a group starts at its first field.
GROUPS = {
    "docs_root": "Sources",
    "chroma_path": "Backend and servers",
    "embedding_model": "Embedding and chunking",
    "batch_size": "Writes and search",
    "analytics": "Search analytics",
    "task_runner": "Prefect",
    "log_format": "Logging",
}

# Defaults that are computed when the settings are loaded, not written in the field.
COMPUTED = {
    "chroma_path": "`chroma/` under `$XDG_DATA_HOME/hetriever/<docs root's name>-<hash>/` "
    "(`~/.local/share` without XDG_DATA_HOME)",
    "state_dir": "`.hetriever` beside `chroma_path`",
    "model_dir": "`$XDG_CACHE_HOME/hetriever/models/<model>` (`~/.cache` without it)",
}

HEADER = f"""\
# Configuration reference

<!-- Generated from hetriever/core/config.py by `{REGENERATE}`; edit the fields'
descriptions there, not this file. tests/core/test_config_reference.py fails when it is not
current. -->

Settings come from their defaults, then a TOML file (`$HETRIEVER_CONFIG`, else `./hetriever.toml`
when present), then environment variables, then the command's own flags (`--docs-root`,
`--chroma-path`, ...). In the file the keys are the setting names below, at the top level or under
a `[hetriever]` table, the webhook's under `[hetriever.webhook]` (its secret belongs in the
environment or a secret file). An invalid value, or an unknown key in the file, stops the command
with one line naming the setting. An empty boolean variable (`HETRIEVER_INCLUDE_DRAFTS=`) is
false; `name=value` pairs are written `a=x,b=y` in the environment and as a table in the file.
"""


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return " or ".join(_type_name(a) for a in inner) + " (optional)"
    if get_origin(annotation) is dict:
        if get_args(annotation)[1:] != (str,):  # `versions`: a spec per repository
            return "JSON object (a table in the file)"
        return "`name=value` pairs"
    if get_origin(annotation) is list:
        return "comma-separated list"
    names = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "text",
        Path: "path",
        SecretStr: "secret",
    }
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(name: str, field: FieldInfo) -> str:
    if name in COMPUTED:
        return COMPUTED[name]
    value = field.get_default(call_default_factory=False)
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None or value in ("", {}, []):
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def _env_names(name: str, field: FieldInfo, prefix: str) -> list[str]:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(c) for c in alias.choices if str(c).isupper()]
    return [prefix + name.upper()]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _description(owner: str, name: str, field: FieldInfo) -> str:
    if not field.description:
        raise ValueError(f"{owner}.{name} has no description: give it Field(description=...)")
    return field.description[0].upper() + field.description[1:]


def _rows(
    model: type[Settings] | type[WebhookSettings], key_prefix: str, env_prefix: str
) -> Iterator[tuple[str | None, str]]:
    """(group starting here or None, table row) for each field of the model."""
    for name, field in model.model_fields.items():
        if name == "webhook":  # the nested model: its own table
            continue
        envs = ", ".join(f"`{e}`" for e in _env_names(name, field, env_prefix))
        row = (
            f"| `{key_prefix}{name}` | {envs} | {_type_name(field.annotation)} | "
            f"{_cell(_default(name, field))} | "
            f"{_cell(_description(model.__name__, name, field))} |"
        )
        yield GROUPS.get(name) if model is Settings else None, row


TABLE_HEAD = "| setting | environment | type | default | what it does |\n|---|---|---|---|---|"


def render() -> str:
    """docs/configuration.md as the settings give it today."""
    parts = [HEADER.rstrip("\n")]
    for group, row in _rows(Settings, "", ENV_PREFIX):
        if group:
            parts.append(f"\n## {group}\n\n{TABLE_HEAD}")
        parts.append(row)
    parts.append(
        "\n## Webhook service (`hetriever serve-webhook`)\n\n"
        "Checked when the service starts; `docs/webhooks.md` tells how it routes a "
        f"push.\n\n{TABLE_HEAD}"
    )
    parts.extend(row for _, row in _rows(WebhookSettings, "webhook.", ENV_PREFIX + "WEBHOOK_"))
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hetriever.core.config_reference",
        description="Write the configuration reference from the settings (or check it).",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the reference is not current; write nothing"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=REFERENCE,
        help="the reference's path (default: docs/configuration.md)",
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        try:
            current = args.output.read_text(encoding="utf-8")
        except OSError as exc:
            print(
                f"{args.output}: cannot be read ({exc.strerror}); run `{REGENERATE}`",
                file=sys.stderr,
            )
            return 1
        if current != text:
            print(f"{args.output} is not current; run `{REGENERATE}`", file=sys.stderr)
            return 1
        print(f"{args.output} is current")
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
