"""The BM25 analyzer: how text becomes terms, the same for documents and queries.

Words and identifiers (`.Site.Params`, `v0.123.0`, `snake_case`) are kept whole and also split
into their pieces (camelCase humps, acronyms, digit runs); English stopwords (but those that
name Hugo template functions: `where`, `in`, `and`) and one-character tokens are dropped;
alphabetic words are stemmed (English Snowball); runs of Chinese, Japanese or Korean text
become character bigrams. `TOKENIZER_VERSION` names this behaviour: an index
written by another version is re-tokenised when opened (`hetriever.store.bm25.bm25_index`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import Stemmer

from hetriever.core import caches

# A word: letters/digits, optionally joined by '.', '_' or '-' (identifiers, file names,
# versions). `[^\W_]` is a Unicode letter or digit.
_WORD = re.compile(r"[^\W_]+(?:[._-][^\W_]+)*")
_JOINERS = re.compile(r"[._-]")
# The pieces of an ASCII identifier: camelCase humps, acronyms and digit runs.
# "RelPermalink" -> Rel, Permalink; "FNV32a" -> FNV, 32, a; "HTTPServer" -> HTTP, Server;
# "URLs" -> URL, s (an acronym ends before a capitalised word of two or more letters).
_PIECES = re.compile(r"[A-Z]+(?=[A-Z][a-z]{2,})|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

ENGLISH_STOPWORDS = frozenset(
    """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing don down during each either etc few for
from further had has have having he her here hers herself him himself his how i if in into is
it its itself just let may me might more most must my myself no nor not now of off on once only
or other our ours ourselves out over own same shall she should so some such than that the their
theirs them themselves then there these they this those through to too under until up very was
we were what when where which while who whom why will with would you your yours yourself
yourselves e.g i.e also via
""".split()
)
# English stopwords that name Hugo template functions and methods: collections.Where (`where`),
# collections.In, collections.After, time.Now, the go-template `and`, `or`, `not`, `if`,
# `with`, time.Time's `.Before`/`.After`. People search for a function by its name ("where
# function", "where .Pages"), which these words alone tell apart, so they are kept as terms.
# The list is the English list's overlap with the function and method names of Hugo's own
# documentation, not words picked by hand; measured in bench/README.md ("Template function
# names kept", whose script is retired).
TEMPLATE_NAMES = frozenset("after and before if in not now or where with".split())
STOPWORDS = ENGLISH_STOPWORDS - TEMPLATE_NAMES

# Stemming, on: English Snowball (PyStemmer) for alphabetic words of any length ("adds" and
# "adding" -> "add"); identifiers with digits and joined compounds stay as written. Light
# suffix stripping (version 1) raised recall@10 from 0.78 to 0.88 on 32 queries
# (`python bench/bench_bm25.py --stem-eval`); Snowball and identifier splitting are measured
# in bench/README.md (bench_quality, page level).
STEM_DEFAULT = True
TOKENIZER_VERSION = "4"  # 3: CJK runs as character bigrams; 4: TEMPLATE_NAMES kept

# Chinese, Japanese and Korean are written without spaces, so a whole clause is one `_WORD`
# match. CJK runs become overlapping character bigrams (a lone character stays a unigram),
# the usual analyzer when no dictionary segmenter is at hand (Lucene's CJKBigramFilter);
# measured on ja/zh title queries in bench/README.md.
_CJK = re.compile(
    r"[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    r"\uac00-\ud7af\uff66-\uff9f]+"
)

_stemmer = Stemmer.Stemmer("english")
_STEMS: dict[str, str] = {}
_STEM_CACHE_MAX = 200_000


def forget_stems() -> None:
    """Empty the stem cache: a run over many sites lets each site's words go with the rest of
    its working set (hetriever.index.release), so the cache holds one site's at a time."""
    _STEMS.clear()


caches.register("stems", forget_stems)


def _stem(word: str) -> str:
    """Snowball stem of an alphabetic word (cached: a corpus has a small vocabulary)."""
    stem = _STEMS.get(word)
    if stem is None:
        stem = _stemmer.stemWord(word) if word.isalpha() else word
        if len(_STEMS) < _STEM_CACHE_MAX:
            _STEMS[word] = stem
    return stem


def _words(text: str) -> Iterator[str]:
    """`_WORD` matches, with CJK runs cut out of them as words of their own."""
    for word in _WORD.findall(text):
        if word.isascii() or not _CJK.search(word):
            yield word
            continue
        at = 0
        for run in _CJK.finditer(word):
            if run.start() > at:
                yield from _WORD.findall(word[at : run.start()])
            yield run.group()
            at = run.end()
        if at < len(word):
            yield from _WORD.findall(word[at:])


def tokenize(text: str, *, stem: bool | None = None) -> list[str]:
    """Lowercase terms for BM25; the same function serves documents and queries.

    `.Site.Params` -> ["site.params", "site", "param"]; `v0.123.0` -> ["v0.123.0", "v0", "123"];
    `RelPermalink` -> ["relpermalink", "rel", "permalink"] (the identifier, then its pieces);
    stopwords and one-character tokens are dropped. `stem=None` means `STEM_DEFAULT`.
    """
    if stem is None:
        stem = STEM_DEFAULT
    out: list[str] = []
    append = out.append

    def term(word: str) -> str | None:
        lower = word.lower()
        if len(lower) > 1 and lower not in STOPWORDS:
            lower = _stem(lower) if stem else lower
            append(lower)
            return lower
        return None

    for word in _words(text):
        if _CJK.match(word):
            if len(word) == 1:
                append(word)
            else:
                out.extend(word[i : i + 2] for i in range(len(word) - 1))
            continue
        if "." in word or "_" in word or "-" in word:
            lower = word.lower()
            if lower not in STOPWORDS:  # "e.g", "i.e"
                append(lower)
            parts = _JOINERS.split(word)
        else:
            parts = [word]
        for part in parts:
            whole = term(part)
            # Only mixed-case or alphanumeric ASCII parts have pieces worth adding.
            if part.isascii() and not (part.islower() and part.isalpha()):
                pieces = _PIECES.findall(part)
                if len(pieces) > 1:
                    for piece in pieces:
                        if piece.lower() != whole:
                            term(piece)
    return out
