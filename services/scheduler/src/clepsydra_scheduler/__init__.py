"""clepsydra_scheduler."""
