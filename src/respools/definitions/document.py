"""The declarative file: pools, subjects, policies, reservations and tokens, validated with every problem
located in the file.

The file's fields are the API's fields (a pool is a :class:`~respools.model.PoolSpec`, a policy a
:class:`~respools.model.PolicySpec`), so what the docs say about the API holds for the file, and a field the
server refuses maps straight back to a line. Reservations and tokens get a ``name``: the API gives them
generated ids, and a file needs a stable handle to know whether "the same" one exists already.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from respools.model import Name, PolicySpec, PoolSpec, ReservationSpec, Role, Subject
from respools.scheduling import DefinitionError, check_pool

from .source import DefinitionFileError, PathPart, Problem, Source, parse_field

FILE_VERSION = 1


class ReservationEntry(ReservationSpec):
    """A reservation as the file names it."""

    name: Name = Field(description="the file's handle for this reservation (stored in the note)")

    @field_validator("start", "end", mode="before")
    @classmethod
    def _dates_are_midnight(cls, value: Any) -> Any:
        # YAML reads `2026-03-01` as a date; a window boundary is an instant.
        if isinstance(value, date) and not isinstance(value, datetime):
            return datetime.combine(value, time(), tzinfo=UTC)
        return value

    @field_validator("start", "end")
    @classmethod
    def _instants_in_utc(cls, value: datetime) -> datetime:
        # A time without offset in a shared file is read as UTC, never as the applying machine's zone.
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class TokenEntry(BaseModel):
    """A token as the file names it. The secret is shown once, when apply issues it."""

    model_config = ConfigDict(extra="forbid")

    name: Name = Field(description="the file's handle for this token (stored in its description)")
    role: Role
    subject: Name | None = Field(default=None, description="required for role 'subject'")
    description: str | None = Field(default=None, max_length=400)

    @model_validator(mode="after")
    def _subject_role_names_subject(self) -> TokenEntry:
        if self.role == Role.SUBJECT and self.subject is None:
            raise ValueError("subject is required for a token with role 'subject'")
        return self


class DefinitionsFile(BaseModel):
    """The whole file. Every section is optional; an empty file defines nothing."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(default=FILE_VERSION, description="format version of the file")
    pools: list[PoolSpec] = Field(default_factory=list)
    subjects: list[Subject] = Field(default_factory=list)
    policies: list[PolicySpec] = Field(default_factory=list)
    reservations: list[ReservationEntry] = Field(default_factory=list)
    tokens: list[TokenEntry] = Field(default_factory=list)

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != FILE_VERSION:
            raise ValueError(f"this respools reads version {FILE_VERSION} files only")
        return value


_FIELD_LEAD = re.compile(r"^(?P<field>[a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_.\-]+|\[\d+\])*)(?P<sep>: | \(| must | is )")
"""The model validators of :mod:`respools.model` start their messages with the field at fault
("reserved.gpu (gpu 4) exceeds…", "end must be after start", "inventory: host…"): that becomes part of the
path, so the problem points at the offending line, not at the start of the entry."""

_VECTOR_KEY = re.compile(r"^(?:invalid resource key|amount of|gpu amounts have)[^']*'(?P<key>[^']+)'")
"""A resource vector's errors name the key at fault ("invalid resource key 'GPU'", "amount of 'mcpu' must…"):
pointing at that key's line beats pointing at the vector's."""

_NAME_HINT = "use 1-63 lowercase letters, digits, '.', '_' or '-', starting and ending with a letter or digit"


def _describe(error: Any) -> tuple[list[PathPart], str]:
    path: list[PathPart] = [p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    kind = error["type"]
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "value_error" and (match := _FIELD_LEAD.match(message)):
        inner = match.group("field")
        path.extend(p for p in re.split(r"\.(?![^\[]*\])", inner) if p)
        if match.group("sep") == ": ":
            message = message[match.end() :]
    if kind == "value_error" and (key := _VECTOR_KEY.match(message)):
        path.append(key.group("key"))
    if kind == "missing":
        message = "required: add it"
    elif kind == "extra_forbidden":
        message = "unknown field: remove it or check its spelling"
    elif kind == "string_pattern_mismatch":
        message = f"{error.get('input')!r} is not a valid name: {_NAME_HINT}"
    return path, message


def _duplicates(source: Source, section: str, keys: list[str], what: str) -> list[Problem]:
    seen: dict[str, int] = {}
    problems: list[Problem] = []
    for i, key in enumerate(keys):
        if key in seen:
            first = source.position((section, seen[key]))
            line = f" (first on line {first.line})" if first else ""
            problems.append(source.problem([section, i], f"{what} {key!r} is defined twice{line}: keep one"))
        else:
            seen[key] = i
    return problems


def _entry_problems(source: Source, doc: DefinitionsFile) -> list[Problem]:
    """Checks that need the whole file, not one entry: duplicates and definitions a pool cannot hold."""
    problems = [
        *_duplicates(source, "pools", [p.name for p in doc.pools], "pool"),
        *_duplicates(source, "subjects", [s.name for s in doc.subjects], "subject"),
        *_duplicates(source, "policies", [f"{p.subject}@{p.pool}" for p in doc.policies], "policy"),
        *_duplicates(source, "reservations", [r.name for r in doc.reservations], "reservation"),
        *_duplicates(source, "tokens", [t.name for t in doc.tokens], "token"),
    ]
    for i, pool in enumerate(doc.pools):
        try:
            check_pool(pool)
        except DefinitionError as exc:
            problems.append(source.problem(["pools", i, *parse_field(exc.field)], exc.message))
    return problems


def load_definitions(source: Source) -> DefinitionsFile:
    """Validate ``source`` as a definitions file; raises :class:`DefinitionFileError` with every problem."""
    data = {} if source.data is None else source.data
    if not isinstance(data, dict):
        raise DefinitionFileError(
            [source.problem([], "the file must be a mapping with pools, subjects, policies, reservations, tokens")]
        )
    try:
        doc = DefinitionsFile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            path, message = _describe(error)
            problems.append(source.problem(path, message))
        raise DefinitionFileError(problems) from None
    problems = _entry_problems(source, doc)
    if problems:
        raise DefinitionFileError(problems)
    return doc


def check_references(source: Source, doc: DefinitionsFile, pools: set[str], subjects: set[str]) -> list[Problem]:
    """Policies, reservations and tokens must name pools and subjects that exist once the file is applied
    (``pools``/``subjects``: the file's own plus the server's that survive the apply)."""
    problems: list[Problem] = []
    sections: list[tuple[str, list[Any]]] = [
        ("policies", doc.policies),
        ("reservations", doc.reservations),
        ("tokens", doc.tokens),
    ]
    for section, entries in sections:
        for i, entry in enumerate(entries):
            pool = getattr(entry, "pool", None)
            if pool is not None and pool not in pools:
                problems.append(source.problem([section, i, "pool"], _missing("pool", pool, "pools")))
            subject = getattr(entry, "subject", None)
            if subject is not None and subject not in subjects:
                problems.append(source.problem([section, i, "subject"], _missing("subject", subject, "subjects")))
    return problems


def _missing(kind: str, name: str, section: str) -> str:
    return f"{kind} {name!r} is neither in this file nor on the server (or --prune removes it): add it under {section}"
