"""The runtime of the parts: transports and process plumbing, apart from the domain.

The HTTP client (``http``, its lean connections ``http_connections``, the store cluster's
membership ``shard_map``), the health server without Flask (``health_http``), Celery's worker
and beat started without its command line (``celery_worker``, ``celery_beat``), tracing
(``telemetry``, ``lean_tracer``) and log lines (``logging``). These import the domain
(``clepsydra_core`` outside this package); the domain imports none of them, nor any framework
(``tests/unit/core/test_domain_imports.py``).
"""
