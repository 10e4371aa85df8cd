from __future__ import annotations

from pathlib import Path

import pytest

from hetriever.core.config import MODEL_MAX_TOKENS, Settings, load_settings
from hetriever.core.errors import ConfigurationError


def test_defaults_fit_the_embedding_window(monkeypatch):
    monkeypatch.delenv("HETRIEVER_SEARCH_RESIDENT_IDLE")  # the suite's own (conftest.py)
    settings = load_settings(env={})
    assert settings == Settings()
    assert settings.chunk_tokens <= MODEL_MAX_TOKENS - 2
    assert settings.use_hybrid_search is True
    assert not settings.server_mode


def test_environment_overrides_and_types():
    settings = load_settings(
        env={
            "HETRIEVER_BATCH_SIZE": "250",
            "HETRIEVER_CHROMA_HOST": "127.0.0.1",
            "HETRIEVER_CHROMA_PORT": "9000",
            "HETRIEVER_INCLUDE_DRAFTS": "yes",
            "HETRIEVER_DOCS_ROOT": "~/docs",
            "HETRIEVER_ACCESS_LEVELS": "internal-docs=PRIVATE, hugo-docs=public",
        }
    )
    assert settings.batch_size == 250
    assert settings.server_mode and settings.chroma_port == 9000
    assert settings.include_drafts is True
    assert settings.docs_root == Path("~/docs").expanduser()
    assert settings.access_levels == {"internal-docs": "PRIVATE", "hugo-docs": "public"}


def test_per_repository_settings_may_name_the_submodule_directory():
    settings = load_settings(
        env={
            "HETRIEVER_SITE_URLS": "opentelemetry.io=https://opentelemetry.io/",
            "HETRIEVER_ACCESS_LEVELS": "hugoDocs=public",
            "HETRIEVER_REPOSITORY_URLS": "hugo-docs=https://example.org/h.git",
        }
    )
    assert settings.site_urls == {"opentelemetry-io": "https://opentelemetry.io/"}
    assert settings.access_levels == {"hugodocs": "public"}
    assert settings.repository_urls == {"hugo-docs": "https://example.org/h.git"}


@pytest.mark.parametrize(
    "word,expected",
    [("true", True), ("1", True), ("yes", True), ("false", False), ("0", False), ("no", False)],
)
def test_use_hybrid_search_env(word, expected):
    assert load_settings(env={"USE_HYBRID_SEARCH": word}).use_hybrid_search is expected


@pytest.mark.parametrize(
    "env,name",
    [
        ({"HETRIEVER_BATCH_SIZE": "many"}, "batch_size"),
        ({"HETRIEVER_BATCH_SIZE": "0"}, "batch_size"),
        ({"HETRIEVER_CHROMA_PORT": "70000"}, "chroma_port"),
        ({"HETRIEVER_CHUNK_TOKENS": "400"}, "chunk_tokens"),
        ({"USE_HYBRID_SEARCH": "maybe"}, "use_hybrid_search"),
        ({"HETRIEVER_LOG_FORMAT": "xml"}, "log_format"),
        ({"HETRIEVER_CONTENT_DIR": "../outside"}, "content_dir"),
        ({"HETRIEVER_ACCESS_LEVELS": "a-repo=SECRET"}, "access_levels"),
        ({"HETRIEVER_SITE_URLS": "hugo-docs=gohugo.io"}, "site_urls"),  # no scheme: no address
        ({"HETRIEVER_TASK_RUNNER": "ray"}, "task_runner"),
        ({"HETRIEVER_FOLLOW_INTERVAL": "-1"}, "follow_interval"),
        ({"HETRIEVER_FOLLOW": "yes"}, "follow"),  # without a Chroma server to follow
        ({"HETRIEVER_BM25_PHRASE_WEIGHT": "-0.5"}, "bm25_phrase_weight"),
        (
            {
                "HETRIEVER_EMBEDDING_MODEL": "sentence-transformers:sentence-transformers/all-MiniLM-L6-v2",
                "HETRIEVER_CHUNK_TOKENS": "400",
            },
            "chunk_tokens",
        ),
        ({"HETRIEVER_DENSE_WEIGHT_SHORT": "1.5"}, "dense_weight_short"),
        ({"HETRIEVER_SHORT_QUERY_TERMS": "-1"}, "short_query_terms"),
        # an empty path would be the current directory; nan and inf pass range checks
        ({"HETRIEVER_DOCS_ROOT": ""}, "docs_root"),
        ({"HETRIEVER_CHROMA_PATH": " "}, "chroma_path"),
        ({"HETRIEVER_STATE_DIR": ""}, "state_dir"),
        ({"HETRIEVER_MODEL_DIR": ""}, "model_dir"),
        ({"HETRIEVER_RUN_LOCK_TIMEOUT": "nan"}, "run_lock_timeout"),
        ({"HETRIEVER_RUN_LOCK_TIMEOUT": "1e12"}, "run_lock_timeout"),
        ({"HETRIEVER_BM25_PHRASE_WEIGHT": "inf"}, "bm25_phrase_weight"),
        ({"HETRIEVER_CHROMA_TIMEOUT": "inf"}, "chroma_timeout"),
        ({"HETRIEVER_DENSE_WEIGHT": "nan"}, "dense_weight"),
        ({"HETRIEVER_EMBEDDING_MODEL": "bogus"}, "embedding_model"),  # not at the first search
        ({"HETRIEVER_MCP_MAX_LINE": "10"}, "mcp_max_line"),  # no request fits in 10 bytes
    ],
)
def test_invalid_values_name_the_setting(env, name):
    with pytest.raises(ConfigurationError) as info:
        load_settings(env=env)
    assert name in str(info.value)
    assert "HETRIEVER_" in str(info.value) or name == "use_hybrid_search"


def test_config_file_then_environment(tmp_path):
    config = tmp_path / "hetriever.toml"
    config.write_text(
        '[hetriever]\nbatch_size = 42\nchroma_path = "data/chroma"\n'
        'repository_urls = { hugo-docs = "https://example.org/hugo.git" }\n'
    )
    settings = load_settings(env={"HETRIEVER_CONFIG": str(config)})
    assert settings.batch_size == 42
    assert settings.chroma_path == Path("data/chroma")
    assert settings.repository_urls == {"hugo-docs": "https://example.org/hugo.git"}
    assert (
        load_settings(env={"HETRIEVER_CONFIG": str(config), "HETRIEVER_BATCH_SIZE": "7"}).batch_size
        == 7
    )


def test_config_file_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("batch_size = = 3")
    with pytest.raises(ConfigurationError, match="cannot be read"):
        load_settings(env={}, config_file=bad)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("bach_size = 3")
    with pytest.raises(ConfigurationError, match="unknown settings: bach_size"):
        load_settings(env={}, config_file=unknown)
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_settings(env={}, config_file=tmp_path / "missing.toml")


def test_state_dir_sits_beside_the_chroma_data(tmp_path):
    settings = load_settings(env={"HETRIEVER_CHROMA_PATH": str(tmp_path / "chroma")})
    assert settings.resolved_state_dir == tmp_path / ".hetriever"


def test_webhook_settings_are_nested_and_layered(tmp_path):
    config = tmp_path / "hetriever.toml"
    config.write_text(
        "[hetriever]\nbatch_size = 8\n[hetriever.webhook]\n"
        'deployment = "ingest/manual"\nmax_body = 4096\n'
    )
    env = {
        "HETRIEVER_CONFIG": str(config),
        "HETRIEVER_WEBHOOK_MAX_BODY": "2048",
        "HETRIEVER_WEBHOOK_SECRET": "s" * 32,
    }
    settings = load_settings(env=env)
    assert settings.batch_size == 8
    assert settings.webhook.deployment == "ingest/manual"  # from the file
    assert settings.webhook.max_body == 2048  # the environment beats the file
    assert settings.webhook.secret.get_secret_value() == "s" * 32
    assert "s" * 32 not in repr(settings)  # the secret is never printed
    assert load_settings(env={}).webhook.max_body == 1024 * 1024


def test_webhook_setting_errors_name_the_nested_setting(tmp_path):
    with pytest.raises(ConfigurationError) as info:
        load_settings(env={"HETRIEVER_WEBHOOK_MAX_BODY": "lots"})
    assert "webhook.max_body" in str(info.value)
    assert "HETRIEVER_WEBHOOK_MAX_BODY" in info.value.hint
    config = tmp_path / "hetriever.toml"
    config.write_text("[webhook]\nsecert = 'x'\n")
    with pytest.raises(ConfigurationError, match="unknown settings: webhook.secert"):
        load_settings(env={}, config_file=config)


def test_replace_validates_again():
    settings = load_settings(env={})
    assert settings.replace(batch_size=7).batch_size == 7
    assert settings.batch_size == 100  # settings are frozen: replace returns a copy
    with pytest.raises(ConfigurationError, match="batch_size"):
        settings.replace(batch_size=0)
    with pytest.raises(ConfigurationError, match="batch_size"):
        settings.replace(batch_size="many")


def test_an_empty_boolean_variable_is_false():
    assert load_settings(env={"HETRIEVER_INCLUDE_DRAFTS": ""}).include_drafts is False
    assert (
        load_settings(
            env={"USE_HYBRID_SEARCH": "0", "HETRIEVER_USE_HYBRID_SEARCH": "1"}
        ).use_hybrid_search
        is True
    )


def test_cors_origins_are_origins_as_a_browser_sends_them_and_none_by_default():
    assert load_settings(env={}, config_file=None).cors_origins == []
    given = load_settings(
        env={"HETRIEVER_CORS_ORIGINS": "https://Docs.Example.org/, http://localhost:1313"},
        config_file=None,
    )
    assert given.cors_origins == ["https://docs.example.org", "http://localhost:1313"]
    for bad in (
        "*",
        "https://docs.example.org/path",
        "docs.example.org",
        "ftp://x.org",
        "https://user@x.org",
        "http://x.org:99999",
    ):
        with pytest.raises(ConfigurationError, match="cors_origins"):
            load_settings(env={"HETRIEVER_CORS_ORIGINS": bad}, config_file=None)


def test_the_page_api_key_is_never_shown():
    settings = load_settings(
        env={"HETRIEVER_PAGE_API_KEY": "htr_secret_page_key"}, config_file=None
    )
    assert settings.page_api_key.get_secret_value() == "htr_secret_page_key"
    assert "htr_secret_page_key" not in repr(settings) and "htr_secret_page_key" not in str(
        settings.model_dump()
    )
