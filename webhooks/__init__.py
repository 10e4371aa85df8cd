"""The GitHub push-webhook service: a Prefect client that starts ingest deployment runs
(`hetriever serve-webhook`, docs/webhooks.md)."""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
