"""Clepsydra store service: the CommitLog and ConsumeQueue owner and its HTTP API."""
