"""Developer tools of the repository: the one stack builder (tools/parts.py) and the local stack
it runs (`python -m tools.stack`, `make run`)."""
