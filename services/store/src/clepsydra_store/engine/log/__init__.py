"""The log: segment files (``segment``), the CommitLog and the checkpoint; the lowest layer of
the engine (it imports no other part of it)."""
