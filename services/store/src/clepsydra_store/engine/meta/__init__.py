"""The store's metadata: topics, consumer groups' offsets and settings (small files written
atomically). Built on the log's file helpers."""
