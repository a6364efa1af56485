from ._flashcl import Context, Desc, devices  # noqa: F401 (temporary)
