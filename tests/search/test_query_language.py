"""The language a query's script names among a site's languages (hetriever.search.query_language)."""

from __future__ import annotations

import pytest

from hetriever.search.query_language import WORD_RATIO, by_words
from hetriever.search.query_language import query_language as _query_language
from hetriever.store.bm25.bm25_index import BM25Index


def query_language(text, languages, counts=({}, [])):
    """By script alone (no word counts): what a site whose index holds none of the words says."""
    return _query_language(text, languages, lambda: counts)


OTEL = ("en", "bn", "es", "fr", "ja", "ko", "pl", "pt", "ro", "uk", "zh")


@pytest.mark.parametrize(
    "query,language",
    [
        ("コレクターの設定", "ja"),  # kana and kanji
        ("トレース", "ja"),  # katakana alone
        ("ｺﾚｸﾀｰ", "ja"),  # halfwidth katakana
        ("OTel コレクター config", "ja"),  # Latin words beside kana
        ("收集器配置", "zh"),  # Chinese characters, no kana: Chinese
        ("컬렉터 설정", "ko"),
        ("налаштування колектора", "uk"),
        ("কালেক্টর কনফিগারেশন", "bn"),
        ("configure the collector", ""),  # Latin: the default (es, fr... look alike)
        ("configuración del colector", ""),
        ("ＡＢＣ", ""),  # fullwidth Latin is Latin
        ("1234 ?!", ""),  # no letters
        ("컬렉터 налаштування", ""),  # two scripts: no say
    ],
)
def test_the_script_names_one_of_the_sites_languages(query, language):
    assert query_language(query, OTEL) == language


def test_a_script_none_of_the_sites_languages_writes_says_nothing():
    assert query_language("컬렉터 설정", ("en", "ja")) == ""
    assert query_language("Ελληνικά", OTEL) == ""


def test_chinese_characters_read_as_japanese_where_the_site_has_no_chinese():
    assert query_language("設定", ("en", "ja")) == "ja"
    assert query_language("設定", ("en", "zh", "ja")) == "zh"


def test_the_sites_own_code_is_returned_and_two_of_one_script_need_the_words():
    assert query_language("收集器", ("en", "zh-cn")) == "zh-cn"
    assert query_language("колектор", ("en", "ru")) == "ru"
    # Ukrainian or Russian: the words choose, else the default
    uk_ru = ("en", "uk", "ru")
    sizes = {"en": 8000, "uk": 300, "ru": 200}
    assert query_language("колектор", uk_ru) == ""
    assert query_language("колектор", uk_ru, (sizes, [{"en": 0, "uk": 12, "ru": 0}])) == "uk"
    # Chinese characters: Chinese unless the words are Japanese ones (計装, not 插桩)
    zh_ja = ("en", "zh", "ja")
    sizes = {"en": 8000, "zh": 900, "ja": 1200}
    assert query_language("宣言的設定", zh_ja) == "zh"
    assert query_language("計装", zh_ja, (sizes, [{"en": 0, "zh": 0, "ja": 40}])) == "ja"
    assert query_language("插桩", zh_ja, (sizes, [{"en": 0, "zh": 35, "ja": 0}])) == "zh"
    assert query_language("收集器", ("en", "zh-cn", "zh-tw")) == "zh-cn"  # the first Chinese
    # the script's languages only: Latin-only Spanish counts do not place kana
    assert (
        query_language(
            "トレース",
            ("en", "es", "ja"),
            ({"en": 10, "es": 10, "ja": 10}, [{"en": 0, "es": 5, "ja": 0}]),
        )
        == "ja"
    )


def test_latin_letters_are_placed_by_their_words_alone():
    sizes = {"en": 8000, "es": 2000, "fr": 1000}
    words = [{"en": 0, "es": 40, "fr": 0}, {"en": 0, "es": 30, "fr": 0}]
    assert query_language("configuración colector", ("en", "es", "fr"), (sizes, words)) == "es"
    assert query_language("configuración colector", ("en", "es", "fr")) == ""  # no counts


# --- by words: each language's docs, and each query word's docs per language ---------------

SIZES = {"en": 8000, "es": 2000, "pt": 1500, "fr": 1000}


def test_words_only_another_language_holds_speak_for_it():
    words = [
        {"en": 0, "es": 40, "pt": 0, "fr": 0},  # configuración
        {"en": 3, "es": 1500, "pt": 900, "fr": 0},  # de: in a few English pages too
        {"en": 0, "es": 30, "pt": 0, "fr": 0},
    ]  # colector
    assert by_words(SIZES, words, "en") == "es"


def test_an_english_query_keeps_the_default():
    words = [
        {"en": 900, "es": 60, "pt": 40, "fr": 70},  # collector: translations keep it
        {"en": 700, "es": 80, "pt": 50, "fr": 90},
    ]  # configuration
    assert by_words(SIZES, words, "en") == ""


def test_fewer_than_half_of_the_words_or_a_tie_say_nothing():
    one_of_three = [
        {"en": 0, "es": 40, "pt": 0, "fr": 0},
        {"en": 900, "es": 60, "pt": 0, "fr": 0},
        {"en": 700, "es": 80, "pt": 0, "fr": 0},
    ]
    assert by_words(SIZES, one_of_three, "en") == ""
    tie = [{"en": 0, "es": 40, "pt": 30, "fr": 0}]  # configurar: Spanish and Portuguese
    assert by_words(SIZES, tie, "en") == ""
    assert by_words(SIZES, [], "en") == ""


def test_a_word_the_default_holds_needs_a_share_many_times_larger():
    share = 10 / SIZES["en"]  # the word's share of English docs
    just_under = int(WORD_RATIO * share * SIZES["es"]) - 1
    assert by_words(SIZES, [{"en": 10, "es": just_under}], "en") == ""
    assert by_words(SIZES, [{"en": 10, "es": just_under + 2}], "en") == "es"


def test_a_bm25_index_counts_each_query_words_docs_per_language(tmp_path):
    with BM25Index(tmp_path / "bm25.sqlite") as index:
        index.upsert(
            ["en1", "en2", "es1", "fr1"],
            [
                "Configure the collector",
                "The collector pipeline",
                "Configuración del colector",
                "Configuration du collecteur",
            ],
            [{"lang": "en"}, {"lang": "en"}, {"lang": "es"}, {"lang": "fr"}],
        )
        index.delete(["en2"])  # a deleted doc counts nowhere
        sizes, per_word = index.language_counts(
            "configuración del collector", ("en", "es", "fr", "ja")
        )
    assert sizes == {"en": 1, "es": 1, "fr": 1, "ja": 0}
    # the words the index holds, in the query's order: configuración, del, collector
    assert per_word == [
        {"en": 0, "es": 1, "fr": 0, "ja": 0},
        {"en": 0, "es": 1, "fr": 0, "ja": 0},
        {"en": 1, "es": 0, "fr": 0, "ja": 0},
    ]
    assert by_words(sizes, per_word, "en") == "es"
