"""What the HTTP services share at their edge (the store, the retry service, analytics):
``jsonio`` reads request bodies and numbers the same way everywhere, ``errors`` names the
HTTP-level error codes once, ``server`` makes the HTTP server's own refusals JSON too."""
