"""The Clepsydra console: server-rendered pages over the store's, the retry service's and the
analytics' HTTP APIs (README.md of this package)."""
