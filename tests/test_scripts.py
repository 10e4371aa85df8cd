"""The language a query's script names among a site's languages (hetriever.scripts)."""

from __future__ import annotations

import pytest

from hetriever.scripts import query_language

OTEL = ("en", "bn", "es", "fr", "ja", "ko", "pl", "pt", "ro", "uk", "zh")


@pytest.mark.parametrize("query,language", [
    ("コレクターの設定", "ja"),                 # kana and kanji
    ("トレース", "ja"),                         # katakana alone
    ("ｺﾚｸﾀｰ", "ja"),                            # halfwidth katakana
    ("OTel コレクター config", "ja"),           # Latin words beside kana
    ("收集器配置", "zh"),                       # Chinese characters, no kana: Chinese
    ("컬렉터 설정", "ko"),
    ("налаштування колектора", "uk"),
    ("কালেক্টর কনফিগারেশন", "bn"),
    ("configure the collector", ""),            # Latin: the default (es, fr... look alike)
    ("configuración del colector", ""),
    ("ＡＢＣ", ""),                             # fullwidth Latin is Latin
    ("1234 ?!", ""),                            # no letters
    ("컬렉터 налаштування", ""),                # two scripts: no say
])
def test_the_script_names_one_of_the_sites_languages(query, language):
    assert query_language(query, OTEL) == language


def test_a_script_none_of_the_sites_languages_writes_says_nothing():
    assert query_language("컬렉터 설정", ("en", "ja")) == ""
    assert query_language("Ελληνικά", OTEL) == ""


def test_chinese_characters_read_as_japanese_where_the_site_has_no_chinese():
    assert query_language("設定", ("en", "ja")) == "ja"
    assert query_language("設定", ("en", "zh", "ja")) == "zh"


def test_the_sites_own_code_is_returned_and_two_of_one_script_say_nothing():
    assert query_language("收集器", ("en", "zh-cn")) == "zh-cn"
    assert query_language("收集器", ("en", "zh-cn", "zh-tw")) == ""
    assert query_language("колектор", ("en", "uk", "ru")) == ""  # Ukrainian or Russian
    assert query_language("колектор", ("en", "ru")) == "ru"
