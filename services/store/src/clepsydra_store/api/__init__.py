"""The store's HTTP API: the route table (``contract.py``), the envelope every answer goes
through (``envelope.py``), the lean WSGI path (``fastpath.py``) and one module of
framework-free handlers per resource."""
