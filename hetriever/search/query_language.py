"""The language a query is written in, where it says so: a search not told a language keeps
to a multilingual site's default, unless the query names another of the site's languages

- by its script (`script_languages`): Japanese kana on a site with `ja`, Hangul with `ko`,
  Cyrillic with `uk`;
- else by its words (`by_words`), where the script leaves a choice: the languages that share
  the Latin alphabet (Spanish, French, Portuguese and English), Chinese or Japanese for
  Chinese characters without kana, Ukrainian or Russian. A word is evidence for a language
  when the share of that language's pages holding it is many times its share of the default
  language's (`configuración`, `collecteur`, `計装`; not `configuration`, which English pages
  hold too). The language most of the query's known words speak for, and more of them than
  for any other, is the query's. An English query keeps the default: its words are the
  default's own. Chinese characters the words do not place read as Chinese.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

# Unicode script (the first word of a letter's name) -> the languages written in it, the more
# likely first. Latin is absent on purpose (see above).
SCRIPT_LANGUAGES: dict[str, tuple[str, ...]] = {
    "HIRAGANA": ("ja",),
    "KATAKANA": ("ja",),
    "KATAKANA-HIRAGANA": ("ja",),
    "CJK": ("zh", "ja"),
    "HANGUL": ("ko",),
    "CYRILLIC": ("uk", "ru", "bg", "sr", "mk", "be", "kk", "ky", "mn", "tg"),
    "GREEK": ("el",),
    "HEBREW": ("he", "yi"),
    "ARABIC": ("ar", "fa", "ur", "ps"),
    "BENGALI": ("bn", "as"),
    "DEVANAGARI": ("hi", "mr", "ne"),
    "TAMIL": ("ta",),
    "TELUGU": ("te",),
    "KANNADA": ("kn",),
    "MALAYALAM": ("ml",),
    "GUJARATI": ("gu",),
    "GURMUKHI": ("pa",),
    "THAI": ("th",),
    "LAO": ("lo",),
    "KHMER": ("km",),
    "MYANMAR": ("my",),
    "GEORGIAN": ("ka",),
    "ARMENIAN": ("hy",),
    "ETHIOPIC": ("am",),
    "SINHALA": ("si",),
}
_KANA = {"HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA"}
_WIDTHS = ("HALFWIDTH", "FULLWIDTH")  # "HALFWIDTH KATAKANA LETTER WO": the script follows


def _scripts(text: str) -> set[str]:
    """The scripts of `text`'s letters that name languages (Latin and the rest left out)."""
    found = set()
    for char in set(text):
        if char.isalpha():
            words = unicodedata.name(char, "").split(" ", 2)
            script = words[1] if words[0] in _WIDTHS and len(words) > 1 else words[0]
            if script in SCRIPT_LANGUAGES:
                found.add(script)
    return found


def _primary(code: str) -> str:
    return code.split("-", 1)[0].lower()


def script_languages(text: str, languages: Sequence[str]) -> tuple[str, ...] | None:
    """The ones of `languages` (a site's codes as its configuration names them: `ja`,
    `zh-cn`) that `text`'s script is written in, the likelier first: None when its letters
    say nothing (Latin only, or none), () when they name no language of the site (or two
    scripts)."""
    scripts = _scripts(text)
    if scripts & _KANA:  # kana with or without Chinese characters: Japanese
        scripts = {"HIRAGANA"}
    if not scripts:
        return None
    if len(scripts) > 1:
        return ()
    (script,) = scripts
    return tuple(
        code for lang in SCRIPT_LANGUAGES[script] for code in languages if _primary(code) == lang
    )


def query_language(
    text: str,
    languages: Sequence[str],
    word_counts: Callable[[], tuple[Mapping[str, int], Sequence[Mapping[str, int]]]],
) -> str:
    """The one of a multilingual site's `languages` (default first) `text` is written in, or
    "": by its script, else by its words (`word_counts()`: `by_words`' sizes and per-word
    counts, asked only when the script leaves a choice). Chinese characters without kana
    are Chinese where the site has both and the words do not say."""
    allowed = script_languages(text, languages)
    if allowed is not None and len(allowed) < 2:
        return allowed[0] if allowed else ""
    sizes, per_word = word_counts()
    found = by_words(sizes, per_word, languages[0], among=allowed)
    if not found and allowed and _primary(allowed[0]) == "zh":  # only CJK is written as zh
        return allowed[0]
    return found


# A word speaks for a language when its share of that language's docs is at least this many
# times its share of the default language's: a word the default's pages hardly hold. Swept
# over 3, 10, 30, 100 and 300 on the multilingual site's title queries, 630 English and 507
# in the other ten languages (bench/README.md, "A query's language"): below 100, English
# titles the smaller translations share ("Kotlin", "Sunsetting OpenCensus") left English.
WORD_RATIO = 100.0


def by_words(
    sizes: Mapping[str, int],
    per_word: Sequence[Mapping[str, int]],
    default: str,
    among: Sequence[str] | None = None,
) -> str:
    """The language the query's words speak for (one of `among`, if given): `sizes`, each
    language's doc count; `per_word`, for each query word the index holds, its doc count in
    each language. "" when no language has at least half of the words and more than any
    other."""
    votes: Counter[str] = Counter()
    for counts in per_word:
        base = counts.get(default, 0) / max(sizes.get(default, 0), 1)
        for lang, held in counts.items():
            if among is not None and lang not in among:
                continue
            if lang != default and held and sizes.get(lang):
                if held / sizes[lang] >= WORD_RATIO * base:
                    votes[lang] += 1
    ranked = votes.most_common(2)
    if not ranked or 2 * ranked[0][1] < len(per_word):
        return ""
    if len(ranked) > 1 and ranked[1][1] == ranked[0][1]:
        return ""  # as many words for another language: the words cannot choose
    return ranked[0][0]
