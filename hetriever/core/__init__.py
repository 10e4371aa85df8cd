"""What every stage shares: the data models passed between stages, one error hierarchy,
settings, logging, names, locks, SQLite access, access levels and fault injection.
Imports nothing else of hetriever.
"""
