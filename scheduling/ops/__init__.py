"""Operations: Prometheus metrics, health endpoints, liveness probes, Celery process hooks."""
