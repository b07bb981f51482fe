"""One module per claim of the paper; each registers itself with ``@claim``."""
