"""Clepsydra gateway: RocketMQ 5 gRPC clients over the store and the retry service."""
