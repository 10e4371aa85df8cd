"""What an ingest costs: the per-file pipeline, hostile pages, small changes, the Prefect flow."""
