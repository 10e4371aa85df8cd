"""The chunk stage: heading-aware chunks measured with the model's own tokenizer,
deterministic ids, page records and the sections of a page.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
