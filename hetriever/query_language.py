"""The language a query is written in, where it says so: a search not told a language keeps
to a multilingual site's default, unless the query names another of the site's languages

- by its script (`by_script`): Japanese kana on a site with `ja`, Hangul with `ko`, Cyrillic
  with `uk`. Chinese characters without kana read as Chinese where the site has it, else as
  Japanese; a script several of the site's languages write (Russian and Ukrainian Cyrillic)
  says nothing by itself;
- else by its words (`by_words`), for the languages that share an alphabet (Spanish, French,
  Portuguese and English in Latin letters): a word is evidence for a language when the share
  of that language's pages holding it is many times its share of the default language's
  (`configuración`, `collecteur`; not `configuration`, which English pages hold too). The
  language most of the query's known words speak for, and more of them than for any other,
  is the query's. An English query keeps the default: its words are the default's own.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

# Unicode script (the first word of a letter's name) -> the languages written in it, the more
# likely first. Latin is absent on purpose (see above).
SCRIPT_LANGUAGES: dict[str, tuple[str, ...]] = {
    "HIRAGANA": ("ja",), "KATAKANA": ("ja",), "KATAKANA-HIRAGANA": ("ja",),
    "CJK": ("zh", "ja"),
    "HANGUL": ("ko",),
    "CYRILLIC": ("uk", "ru", "bg", "sr", "mk", "be", "kk", "ky", "mn", "tg"),
    "GREEK": ("el",), "HEBREW": ("he", "yi"), "ARABIC": ("ar", "fa", "ur", "ps"),
    "BENGALI": ("bn", "as"), "DEVANAGARI": ("hi", "mr", "ne"), "TAMIL": ("ta",),
    "TELUGU": ("te",), "KANNADA": ("kn",), "MALAYALAM": ("ml",), "GUJARATI": ("gu",),
    "GURMUKHI": ("pa",), "THAI": ("th",), "LAO": ("lo",), "KHMER": ("km",),
    "MYANMAR": ("my",), "GEORGIAN": ("ka",), "ARMENIAN": ("hy",), "ETHIOPIC": ("am",),
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


def by_script(text: str, languages: Sequence[str]) -> str:
    """The one of `languages` (a site's language codes, as its configuration names them:
    `ja`, `zh-cn`) that `text` is written in by its script; "" when its letters do not say
    (Latin only, no letters, two scripts, or a script several of them write)."""
    scripts = _scripts(text)
    if scripts & _KANA:  # kana with or without Chinese characters: Japanese
        scripts = {"HIRAGANA"}
    if len(scripts) != 1:
        return ""
    by_primary: dict[str, list[str]] = {}
    for code in languages:
        by_primary.setdefault(_primary(code), []).append(code)
    (script,) = scripts
    written = [lang for lang in SCRIPT_LANGUAGES[script] if lang in by_primary]
    if script == "CJK" and written:
        written = written[:1]  # Chinese first, where the site has it
    if len(written) != 1 or len(by_primary[written[0]]) != 1:
        return ""  # e.g. uk and ru both, or zh-cn and zh-tw: the script cannot choose
    return by_primary[written[0]][0]


# A word speaks for a language when its share of that language's docs is at least this many
# times its share of the default language's (bench/README.md, "A query's language": swept
# over 3, 10 and 30 on every language's title queries and the English ones).
WORD_RATIO = 10.0


def by_words(sizes: Mapping[str, int], per_word: Sequence[Mapping[str, int]],
             default: str) -> str:
    """The language the query's words speak for: `sizes`, each language's doc count;
    `per_word`, for each query word the index holds, its doc count in each language. ""
    when no language has at least half of the words and more than any other."""
    votes: Counter[str] = Counter()
    for counts in per_word:
        base = counts.get(default, 0) / max(sizes.get(default, 0), 1)
        for lang, held in counts.items():
            if lang != default and held and sizes.get(lang):
                if held / sizes[lang] >= WORD_RATIO * base:
                    votes[lang] += 1
    ranked = votes.most_common(2)
    if not ranked or 2 * ranked[0][1] < len(per_word):
        return ""
    if len(ranked) > 1 and ranked[1][1] == ranked[0][1]:
        return ""  # as many words for another language: the words cannot choose
    return ranked[0][0]
