"""clepsydra_retry."""
