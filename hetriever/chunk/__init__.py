"""The chunk stage: heading-aware chunks measured with the model's own tokenizer,
deterministic ids, page records and the sections of a page.
"""
