"""The web dashboard served at ``/``: pools and their GPU maps, leases, the queue, history and
reservations, kept live over server-sent events (DESIGN §4, issue 8).

Server-rendered Jinja2 templates with a small hand-written script and SVG; no CDN, no build step.
The app includes :data:`router` like any API router; its lifespan starts the dashboard's parts (see
:mod:`respools.server.dashboard.runtime`) inside the service's own. See ``docs/dashboard.md``."""

from respools.server.dashboard.routes import router

__all__ = ["router"]
