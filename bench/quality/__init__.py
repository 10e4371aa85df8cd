"""What a search returns: page-level quality on the query and question sets, and what each change tried did to it."""
