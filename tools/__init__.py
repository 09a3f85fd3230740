"""Developer tools of the repository: the local stack (`python -m tools.stack`, `make run`)."""
