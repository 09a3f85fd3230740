"""clepsydra_client."""
