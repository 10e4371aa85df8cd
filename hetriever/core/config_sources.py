"""Where `load_settings` reads from, for pydantic-settings: an environment mapping and the
config file's tables, the same ones for the outer settings and the nested webhook settings."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource
from pydantic_settings.sources.utils import parse_env_vars


class _Sources:
    """Where one `load_settings` call reads from: an environment mapping and a config file.

    Held in a context variable so that the nested webhook settings, built by their own
    pydantic-settings class, read the same environment and file as the outer model.
    """

    def __init__(self, env: Mapping[str, str], file_data: dict[str, Any]) -> None:
        self.env = env
        self.file_data = file_data


_SOURCES: contextvars.ContextVar[_Sources | None] = contextvars.ContextVar("_SOURCES", default=None)


class MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over the mapping `load_settings` was given."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        sources = _SOURCES.get()
        env = os.environ if sources is None else sources.env
        return parse_env_vars(
            env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


class FileSource(PydanticBaseSettingsSource):
    """The config file's table for one settings class (already read and checked)."""

    def __init__(self, settings_cls: type[BaseSettings], table: str | None) -> None:
        super().__init__(settings_cls)
        self.table = table

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ answers for all fields at once

    def __call__(self) -> dict[str, Any]:
        sources = _SOURCES.get()
        data = {} if sources is None else sources.file_data
        if self.table is None:
            return {k: v for k, v in data.items() if k != "webhook"}
        return dict(data.get(self.table) or {})


@contextlib.contextmanager
def reading(env: Mapping[str, str], file_data: dict[str, Any]) -> Iterator[None]:
    """Within the block, every settings class built reads `env` and `file_data`."""
    token = _SOURCES.set(_Sources(env, file_data))
    try:
        yield
    finally:
        _SOURCES.reset(token)
