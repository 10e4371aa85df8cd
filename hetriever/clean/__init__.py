"""The clean stage: Hugo shortcodes expanded, raw HTML and Markdown made plain text,
fenced code kept as written; a page becomes ordered blocks.
"""
