"""docs/configuration.md is the reference `Settings` gives today: regenerated in memory and
compared, every setting in it under the variable that really sets it."""

from __future__ import annotations

import pytest

from hetriever.core.config import ENV_PREFIX, Settings, WebhookSettings, load_settings
from hetriever.core.config_reference import REFERENCE, REGENERATE, _rows, main, render
from tests.support.helpers import REPO_ROOT


def test_the_reference_in_docs_is_current():
    assert REFERENCE == REPO_ROOT / "docs" / "configuration.md"
    assert REFERENCE.read_text(encoding="utf-8") == render(), (
        f"docs/configuration.md is not current: run `{REGENERATE}`"
    )


@pytest.mark.parametrize(
    "model,key,env",
    [(Settings, "", ENV_PREFIX), (WebhookSettings, "webhook.", ENV_PREFIX + "WEBHOOK_")],
)
def test_every_setting_has_a_row_with_its_variable_and_a_description(model, key, env):
    text = REFERENCE.read_text(encoding="utf-8")
    for name, field in model.model_fields.items():
        if name == "webhook":
            continue
        variable = "USE_HYBRID_SEARCH" if name == "use_hybrid_search" else env + name.upper()
        assert f"| `{key}{name}` | `" in text, f"{key}{name} is missing from the reference"
        row = next(line for line in text.splitlines() if line.startswith(f"| `{key}{name}` |"))
        assert f"`{variable}`" in row
        assert field.description and len(field.description) > 10, name


def test_the_documented_variables_set_their_settings():
    """Each scalar setting's row names a variable that load_settings reads: set to a value
    other than the default, it comes back."""
    changed = {int: lambda v: v + 1, float: lambda v: v + 0.5, bool: lambda v: not v}
    checked = 0
    for name, field in Settings.model_fields.items():
        kind = field.annotation
        if kind not in changed or name in {"follow", "chunk_tokens", "default_top_k"}:
            continue  # follow needs a server; chunk_tokens and default_top_k sit at their maxima
        value = changed[kind](field.default)
        if kind is float and 0 < field.default <= 1:  # shares and similarities stay within 1
            value = field.default / 2
        row = next(
            line
            for line in REFERENCE.read_text(encoding="utf-8").splitlines()
            if line.startswith(f"| `{name}` |")
        )
        variable = row.split("|")[2].split(",")[0].strip(" `")
        got = getattr(load_settings(env={variable: str(value).lower()}), name)
        assert got == value, (name, variable, got)
        checked += 1
    assert checked > 30


def test_a_setting_without_a_description_cannot_be_written():
    class Undescribed(Settings):
        new_knob: int = 3

    with pytest.raises(ValueError, match="Undescribed.new_knob has no description"):
        list(_rows(Undescribed, "", ENV_PREFIX))


def test_check_fails_on_a_stale_or_missing_reference_and_writing_makes_it_current(tmp_path, capsys):
    out = tmp_path / "configuration.md"
    assert main(["--check", "--output", str(out)]) == 1
    assert "cannot be read" in capsys.readouterr().err
    out.write_text(render().replace("| `fetch_timeout` |", "| `fetch_timeout_s` |"))
    assert main(["--check", "--output", str(out)]) == 1
    assert f"not current; run `{REGENERATE}`" in capsys.readouterr().err
    assert main(["--output", str(out)]) == 0
    assert main(["--check", "--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
