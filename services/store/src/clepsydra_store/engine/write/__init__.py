"""The write path: the record codec, the routing of a produce request (S1, T1, R10, L2,
UNIQ_KEY), the produce encoder, the refusals, and the writer (the locked append and its
dispatch). Built on the log, the indexes and the metadata."""
