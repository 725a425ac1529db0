"""The pool service: REST API, persistent store, reconciler and auth (DESIGN §5).

Importing this package needs the ``server`` extra; :func:`create_app` builds the ASGI app from
:class:`Settings`.
"""

from respools.server.app import create_app
from respools.server.settings import Settings

__all__ = ["Settings", "create_app"]
