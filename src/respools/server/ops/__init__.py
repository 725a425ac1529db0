"""What the API does, free of HTTP: each function runs one store transaction and raises
:class:`~respools.server.errors.ApiError` for a refusal."""
