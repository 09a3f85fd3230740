"""The store's HTTP API: one blueprint per resource, the produce fast path, errors, spans."""
