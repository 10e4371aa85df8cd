"""Session-scoped Prefect test harness (shared by flow and webhook tests)."""
