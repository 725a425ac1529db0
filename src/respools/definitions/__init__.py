"""Declarative definitions (``respools apply -f pools.yaml``): read and validate the file with every
problem located, compare it with the server's state, and plan the changes in a safe order.

No I/O beyond reading the file: the CLI fetches the server's state with the client, hands it to
:func:`make_plan`, and carries the plan out. Keeping the model here, apart from the commands, lets the
dashboard or a GitOps controller reuse it.
"""

from respools.definitions.document import DefinitionsFile, ReservationEntry, TokenEntry, check_references
from respools.definitions.document import load_definitions as validate
from respools.definitions.plan import MISSING, Action, Change, FieldChange, Plan, make_plan
from respools.definitions.source import (
    DefinitionFileError,
    FieldPath,
    Position,
    Problem,
    Source,
    format_path,
    parse_field,
)
from respools.definitions.state import Item, Kind, ServerState, current_items, desired_items, request_body

__all__ = [
    "MISSING",
    "Action",
    "Change",
    "DefinitionFileError",
    "DefinitionsFile",
    "FieldChange",
    "FieldPath",
    "Item",
    "Kind",
    "Plan",
    "Position",
    "Problem",
    "ReservationEntry",
    "ServerState",
    "Source",
    "TokenEntry",
    "check_references",
    "current_items",
    "desired_items",
    "format_path",
    "make_plan",
    "parse_field",
    "request_body",
    "validate",
]
