"""The warm fork server of @torl-ts/sandbox, one module per concern (see ../forkserver.py)."""
