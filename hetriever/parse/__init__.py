"""The parse stage: front matter, a page's language and public URL as Hugo builds them,
the rules that skip a file, and the links a page makes.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
