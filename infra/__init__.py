"""The local stack: service definitions, process supervision, health checks and bootstrap."""
