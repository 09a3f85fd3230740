"""Clepsydra shared library: formats, naming, delay levels, errors, settings, telemetry.

Every service and the client import their wire and record formats from here, so there is
exactly one definition of each.
"""

__version__ = "0.1.0"
