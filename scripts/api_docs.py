"""Write ``docs/api.md``, the REST API reference, from the service's own OpenAPI document.

Generated rather than written so that it cannot drift from the routes: ``make api-docs`` rewrites it, and
``python scripts/api_docs.py --check`` (run by the test suite) fails when the committed file is stale.
The app is built without starting it (no database is opened), so this runs anywhere the server extra is
installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "api.md"
METHODS = ("get", "post", "put", "delete", "patch")

Spec = dict[str, Any]
ERROR_BODY = "[ErrorBody](#schema-errorbody)"


def openapi() -> Spec:
    from respools.server import Settings, create_app

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(database_url=f"sqlite:///{tmp}/openapi.db"))
        spec: Spec = app.openapi()
        return spec


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def anchor(name: str) -> str:
    return "schema-" + name.lower().replace("_", "-")


def type_of(schema: Spec) -> str:
    """A schema as a short type expression with links to named schemas: ``list[[Host](#…)] | null``."""
    if "$ref" in schema:
        name = ref_name(schema["$ref"])
        return f"[{name}](#{anchor(name)})"
    options: list[Spec] = schema.get("anyOf") or schema.get("oneOf") or []
    if options:
        return " \\| ".join(type_of(option) for option in options)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return type_of(schema["allOf"][0])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type")
    if kind == "array":
        return f"list[{type_of(schema.get('items', {}))}]"
    if kind == "object" or "additionalProperties" in schema:
        values = schema.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"map[string, {type_of(values)}]"
        return "object"
    if isinstance(kind, str):
        return "integer" if kind == "integer" else kind
    return "any"


def constraints(schema: Spec) -> str:
    parts = []
    for key, text in (
        ("minimum", "≥ {}"),
        ("exclusiveMinimum", "> {}"),
        ("maximum", "≤ {}"),
        ("exclusiveMaximum", "< {}"),
        ("minLength", "length ≥ {}"),
        ("maxLength", "length ≤ {}"),
        ("pattern", "pattern `{}`"),
    ):
        if key in schema:
            value = schema[key]
            parts.append(text.format(int(value) if isinstance(value, float) and value.is_integer() else value))
    for option in schema.get("anyOf", []):
        extra = constraints(option)
        if extra:
            parts.append(extra)
    return ", ".join(parts)


def cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def describe(schema: Spec) -> str:
    text = schema.get("description", "")
    limits = constraints(schema)
    if "default" in schema and schema["default"] not in (None, [], {}):
        limits = ", ".join(filter(None, [limits, f"default `{json.dumps(schema['default'])}`"]))
    return cell(" ".join(filter(None, [text, f"({limits})" if limits else ""])))


def body_schema(content: Spec | None) -> str | None:
    if not content:
        return None
    for media in ("application/json", "text/event-stream", "text/plain"):
        if media in content:
            schema = content[media].get("schema")
            return type_of(schema) if schema else media
    return ", ".join(content)


def operation_section(path: str, method: str, op: Spec) -> list[str]:
    auth = "bearer token" if op.get("security") else "none"
    lines = [f"### `{method.upper()} {path}`", "", f"**{op.get('summary', '')}** — auth: {auth}", ""]
    if op.get("description"):
        lines += [op["description"].strip(), ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            schema = p.get("schema", {})
            merged = schema | ({"description": p["description"]} if p.get("description") else {})
            required = "yes" if p.get("required") else ""
            lines.append(f"| `{p['name']}` | {p['in']} | {type_of(schema)} | {required} | {describe(merged)} |")
        lines.append("")
    body = op.get("requestBody")
    if body:
        lines += [f"Body: {body_schema(body.get('content'))}" + (" (required)" if body.get("required") else ""), ""]
    lines += ["| status | answer |", "|---|---|"]
    refusals = []
    for status in sorted(op.get("responses", {}), key=str):
        response = op["responses"][status]
        schema = body_schema(response.get("content"))
        if status.startswith(("4", "5")) and schema == ERROR_BODY:
            refusals.append(status)
            continue
        text = cell(response.get("description", ""))
        lines.append(f"| {status} | {text}{': ' + schema if schema else ''} |")
    if refusals:
        lines.append(f"| {', '.join(refusals)} | a [refusal](#errors): {ERROR_BODY} |")
    return [*lines, ""]


def error_statuses(spec: Spec) -> dict[str, str]:
    """What each refusal status means, as the routes document it (the same for every endpoint)."""
    found: dict[str, str] = {}
    for item in spec["paths"].values():
        for method in METHODS:
            for status, response in item.get(method, {}).get("responses", {}).items():
                if status.startswith(("4", "5")) and body_schema(response.get("content")) == ERROR_BODY:
                    found.setdefault(status, cell(response.get("description", "")))
    return dict(sorted(found.items()))


def schema_section(name: str, schema: Spec) -> list[str]:
    lines = [f'<a id="{anchor(name)}"></a>', "", f"### {name}", ""]
    if schema.get("description"):
        lines += [schema["description"].strip(), ""]
    if "enum" in schema:
        return [*lines, "One of: " + ", ".join(f"`{v}`" for v in schema["enum"]), ""]
    properties: Spec = schema.get("properties", {})
    if not properties:
        return [*lines, f"Type: {type_of(schema)}", ""]
    required = set(schema.get("required", []))
    lines += ["| field | type | required | description |", "|---|---|---|---|"]
    for field, prop in properties.items():
        lines.append(f"| `{field}` | {type_of(prop)} | {'yes' if field in required else ''} | {describe(prop)} |")
    return [*lines, ""]


def operations_by_tag(spec: Spec) -> Iterable[tuple[str, str, list[tuple[str, str, Spec]]]]:
    ops: dict[str, list[tuple[str, str, Spec]]] = {}
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                tag = (item[method].get("tags") or ["other"])[0]
                ops.setdefault(tag, []).append((path, method, item[method]))
    described = {t["name"]: t.get("description", "") for t in spec.get("tags", [])}
    for tag in [*described, *sorted(set(ops) - set(described))]:
        if tag in ops:
            yield tag, described.get(tag, ""), ops[tag]


def render(spec: Spec) -> str:
    info = spec["info"]
    lines = [
        f"# REST API reference ({info['title']} {info['version']})",
        "",
        "<!-- Generated by scripts/api_docs.py from the service's OpenAPI document: do not edit; run "
        "`make api-docs`. -->",
        "",
        info.get("description", "").strip(),
        "",
        "The live document is served at `/openapi.json` (interactive at `/docs`).",
        "",
        '<a id="errors"></a>',
        "",
        f"Refusals are {ERROR_BODY} answers (`detail` says what is wrong and what to do, `field` names the "
        "value at fault):",
        "",
        "| status | meaning |",
        "|---|---|",
        *(f"| {status} | {text} |" for status, text in error_statuses(spec).items()),
        "",
        "## Endpoints",
        "",
    ]
    sections: list[str] = []
    for tag, description, ops in operations_by_tag(spec):
        lines.append(f"- **{tag}** — {description}")
        sections += [f"## {tag.capitalize()}", "", description, ""]
        for path, method, op in ops:
            lines.append(f"  - `{method.upper()} {path}` — {op.get('summary', '')}")
            sections += operation_section(path, method, op)
    lines += ["", *sections, "## Schemas", ""]
    for name in sorted(spec.get("components", {}).get("schemas", {})):
        lines += schema_section(name, spec["components"]["schemas"][name])
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if docs/api.md is not up to date")
    parser.add_argument("--output", type=Path, default=TARGET)
    args = parser.parse_args(argv)
    text = render(openapi())
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date with the API: run `make api-docs`", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
