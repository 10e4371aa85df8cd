"""The language a query is written in, where its script says so: a search not told a language
keeps to a multilingual site's default, unless the query's letters name another of the site's
languages (Japanese kana on a site with `ja`, Hangul with `ko`, Cyrillic with `uk`).

Only scripts are read, not words: a query in Latin letters keeps the default (Spanish and
English share an alphabet, and a short query does not tell them apart), and a script several
of a site's languages write (Russian and Ukrainian Cyrillic) says nothing there. Chinese
characters without kana read as Chinese where the site has it, else as Japanese.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

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


def query_language(text: str, languages: Sequence[str]) -> str:
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
