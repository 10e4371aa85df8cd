"""The GitHub push-webhook service: a Prefect client that starts ingest deployment runs
(`hetriever serve-webhook`, docs/webhooks.md)."""
