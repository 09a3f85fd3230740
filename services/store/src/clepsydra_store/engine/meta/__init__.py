"""The store's metadata: topics, consumer groups' offsets and settings, orderly consumers'
queue locks (small files written atomically, or memory). Built on the log's file helpers."""
