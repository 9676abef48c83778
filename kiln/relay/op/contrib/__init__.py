"""External-compiler support (``relay.op.contrib``)."""
