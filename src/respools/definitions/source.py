"""A YAML file read together with where every value sits in it.

Errors about a definition must point at the file, line and field (``pools.yaml:12:5: pools[0].capacity.gpu``),
whether pydantic found them, the cross-reference checks did, or the server refused a change. PyYAML's
node marks know the lines; this module composes the node tree once, builds the plain data from it, and
keeps a path → position map so that any field path can be turned back into a place in the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PathPart = str | int
FieldPath = tuple[PathPart, ...]


@dataclass(frozen=True, slots=True)
class Position:
    """1-based line and column, as editors and compilers print them."""

    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a definition file, already located."""

    file: str
    path: FieldPath
    message: str
    position: Position | None

    @property
    def field(self) -> str:
        return format_path(self.path)

    def __str__(self) -> str:
        where = self.file if self.position is None else f"{self.file}:{self.position.line}:{self.position.column}"
        subject = f"{self.field}: " if self.path else ""
        return f"{where}: {subject}{self.message}"


class DefinitionFileError(Exception):
    """The file cannot be applied; ``problems`` says where and why (every one found, not only the first)."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


def format_path(path: FieldPath) -> str:
    """``("pools", 0, "capacity", "gpu")`` → ``pools[0].capacity.gpu``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


_TOKEN = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def parse_field(text: str) -> list[PathPart]:
    """The parts of a dotted field as the server writes it (``inventory[0].gpus[1].uuid``). Keys that
    contain dots themselves (``mig.3g.40gb``) come back split; :meth:`Source.resolve` rejoins them."""
    return [int(index) if index else name for index, name in _TOKEN.findall(text)]


@dataclass
class Source:
    """A parsed YAML document: its data and the position of every key and item in it."""

    file: str
    text: str
    data: Any
    positions: dict[FieldPath, Position] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Source:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise DefinitionFileError([Problem(str(path), (), f"cannot read the file: {exc.strerror}", None)]) from exc
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, file: str = "<string>") -> Source:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return cls(file, text, None)
            problems: list[Problem] = []
            positions: dict[FieldPath, Position] = {}
            _index(node, (), positions, problems, file)
            if problems:
                raise DefinitionFileError(problems)
            data = loader.construct_document(node)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            position = Position(mark.line + 1, mark.column + 1) if mark is not None else None
            message = " ".join(filter(None, [exc.context, exc.problem])) or "not valid YAML"
            raise DefinitionFileError([Problem(file, (), f"not valid YAML: {message}", position)]) from exc
        except yaml.YAMLError as exc:
            raise DefinitionFileError([Problem(file, (), f"not valid YAML: {exc}", None)]) from exc
        finally:
            loader.dispose()
        return cls(file, text, data, positions)

    def resolve(self, parts: list[PathPart] | FieldPath) -> FieldPath:
        """The longest prefix of ``parts`` that exists in the data, with dotted keys rejoined.

        A server field such as ``capacity.mig.3g.40gb`` splits into five parts; walking the data shows
        that ``mig.3g.40gb`` is one key. Parts past what the file holds (a default the server filled in)
        are kept, so the message names the field while the position falls back to its nearest parent."""
        resolved: list[PathPart] = []
        node = self.data
        i = 0
        parts = list(parts)
        while i < len(parts):
            part = parts[i]
            if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node, i = node[part], i + 1
                resolved.append(part)
                continue
            if isinstance(node, dict):
                for j in range(len(parts), i, -1):
                    chunk = parts[i:j]
                    if all(isinstance(p, str) for p in chunk):
                        key = ".".join(str(p) for p in chunk)
                        if key in node:
                            node, i = node[key], j
                            resolved.append(key)
                            break
                else:
                    break
                continue
            break
        rest = parts[i:]
        if rest and all(isinstance(p, str) for p in rest):
            resolved.append(".".join(str(p) for p in rest))
        else:
            resolved.extend(rest)
        return tuple(resolved)

    def position(self, path: FieldPath) -> Position | None:
        """Where ``path`` is written, or its nearest written parent."""
        for end in range(len(path), -1, -1):
            found = self.positions.get(path[:end])
            if found is not None:
                return found
        return None

    def problem(self, path: FieldPath | list[PathPart], message: str) -> Problem:
        resolved = self.resolve(path)
        return Problem(self.file, resolved, message, self.position(resolved))


def _index(
    node: yaml.Node, path: FieldPath, positions: dict[FieldPath, Position], problems: list[Problem], file: str
) -> None:
    """Record the position of every mapping key and sequence item under ``node``; flag duplicate keys,
    which PyYAML would otherwise silently resolve to the last one."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else repr(key_node.value)
            here = Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            child = (*path, key)
            if key in seen:
                problems.append(
                    Problem(file, child, f"duplicate key (first written on line {seen[key]}): keep one", here)
                )
                continue
            seen[key] = here.line
            positions[child] = here
            _index(value_node, child, positions, problems, file)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = (*path, i)
            positions[child] = Position(item.start_mark.line + 1, item.start_mark.column + 1)
            _index(item, child, positions, problems, file)
