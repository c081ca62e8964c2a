"""The broker's request processors: one module per request family, and handlers.py, the one
table of request codes and the handlers that answer them."""
