"""The query API: FastAPI routes over the serving layer, the ingest endpoint, and the dashboard."""
