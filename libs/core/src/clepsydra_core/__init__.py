"""Clepsydra shared library: the domain (records, properties, naming, delay levels, rules,
validation, errors, settings, ``wire/``) and, in ``runtime/``, what runs it (the HTTP client,
the health server, Celery's worker and beat, telemetry, logging).

Every service and the client import their wire and record formats from here, so there is
exactly one definition of each. The domain imports neither ``runtime/`` nor any framework
(``tests/unit/core/test_domain_imports.py``).
"""

__version__ = "0.1.0"
