"""The clean stage: Hugo shortcodes expanded, raw HTML and Markdown made plain text,
fenced code kept as written; a page becomes ordered blocks.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
