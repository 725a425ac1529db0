"""The environment every ZenML process in these tests runs with: analytics off, quiet logs, no dashboard."""

from __future__ import annotations

QUIET_ZENML_ENV = {
    "ZENML_ANALYTICS_OPT_IN": "false",
    "ZENML_LOGGING_VERBOSITY": "WARN",
    "ZENML_ENABLE_RICH_TRACEBACK": "false",
    "ZENML_DEBUG": "false",
    "AUTO_OPEN_DASHBOARD": "false",
}
