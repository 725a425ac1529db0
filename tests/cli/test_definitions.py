"""The declarative file model on its own (no server): problems located at their line and field,
server fields mapped back to lines, and the plan's diff and order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from respools.definitions import (
    Action,
    DefinitionFileError,
    Kind,
    ServerState,
    Source,
    check_references,
    current_items,
    desired_items,
    make_plan,
    parse_field,
    request_body,
    validate,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

GOOD = """\
pools:
  - name: onprem
    capacity:
      gpu: 8
      mig.3g.40gb: 2
    gpu_class: a100-80gb
subjects:
  - name: team-a
policies:
  - subject: team-a
    pool: onprem
    reserved: {gpu: 2}
reservations:
  - name: eval
    subject: team-a
    pool: onprem
    resources: {gpu: 1}
    start: 2030-01-01T00:00:00+02:00
    end: 2030-01-02
tokens:
  - {name: ci, role: subject, subject: team-a}
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(DefinitionFileError) as err:
        validate(Source.parse(text, "pools.yaml"))
    return [str(p) for p in err.value.problems]


def test_schema_problems_name_file_line_and_field() -> None:
    text = GOOD.replace("    gpu_class: a100-80gb\n", "    gpu_clas: a100-80gb\n").replace(
        "reserved: {gpu: 2}", "reserved: {gpu: 2}\n    limit: {gpu: 1}"
    )
    found = problems_of(text)
    assert found[0] == "pools.yaml:6:5: pools[0].gpu_clas: unknown field: remove it or check its spelling"
    assert found[1].startswith("pools.yaml:12:16: policies[0].reserved.gpu: reserved.gpu (gpu 2) exceeds limit.gpu")
    assert len(found) == 2


def test_every_problem_is_reported_not_only_the_first() -> None:
    found = problems_of(
        "pools:\n  - name: Bad\n  - name: ok\n    capacity: {gpu: -1}\ntokens:\n  - {name: t, role: subject}\n"
    )
    assert [p.split(": ")[0] for p in found] == ["pools.yaml:2:5", "pools.yaml:4:16", "pools.yaml:6:5"]
    assert "not a valid name" in found[0]
    assert "pools[1].capacity.gpu" in found[1] and ">= 0" in found[1]
    assert "tokens[0].subject: subject is required" in found[2]


def test_cross_entry_problems_are_located() -> None:
    text = GOOD + "  - {name: ci, role: viewer}\n"
    assert problems_of(text) == ["pools.yaml:22:5: tokens[1]: token 'ci' is defined twice (first on line 21): keep one"]
    bad_mig = GOOD.replace("mig.3g.40gb", "mig.3g.20gb")
    (problem,) = problems_of(bad_mig)
    assert problem.startswith(
        "pools.yaml:5:7: pools[0].capacity.mig.3g.20gb: unknown MIG profile '3g.20gb' for a100-80gb"
    )


def test_yaml_errors_and_duplicate_keys_are_located() -> None:
    (syntax,) = problems_of("pools:\n  - name: a\n   capacity: {gpu: 1}\n")
    assert syntax.startswith("pools.yaml:3:") and "not valid YAML" in syntax
    (duplicate,) = problems_of("pools:\n  - name: a\n    name: b\n")
    assert duplicate == "pools.yaml:3:5: pools[0].name: duplicate key (first written on line 2): keep one"
    (shape,) = problems_of("- just a list\n")
    assert "must be a mapping" in shape


def test_server_fields_map_back_to_lines() -> None:
    source = Source.parse(GOOD, "pools.yaml")
    problem = source.problem(("pools", 0, *parse_field("capacity.mig.3g.40gb")), "too many")
    assert str(problem) == "pools.yaml:5:7: pools[0].capacity.mig.3g.40gb: too many"
    # A field the file does not write (the server's default) keeps its name and points at its entry.
    problem = source.problem(("pools", 0, *parse_field("settings.namespace")), "bad")
    assert str(problem) == "pools.yaml:2:5: pools[0].settings.namespace: bad"


def test_references_must_exist_after_the_apply() -> None:
    source = Source.parse(GOOD.replace("pool: onprem\n    reserved", "pool: elsewhere\n    reserved"), "pools.yaml")
    doc = validate(source)
    (problem,) = check_references(source, doc, {"onprem"}, {"team-a"})
    assert str(problem).startswith("pools.yaml:11:5: policies[0].pool: pool 'elsewhere' is neither in this file")
    assert check_references(source, doc, {"onprem", "elsewhere"}, {"team-a"}) == []


def server_view(doc_items: list[Any]) -> ServerState:
    """What the server would list after applying ``GOOD``: stored forms filled in, timestamps added,
    reservations and tokens with ids and their apply marker."""
    state: dict[str, list[dict[str, Any]]] = {
        k: [] for k in ("pools", "subjects", "policies", "reservations", "tokens")
    }
    for n, item in enumerate(doc_items):
        body = request_body(item, None)
        if item.kind == Kind.POOL:
            state["pools"].append(body | {"forms": ["whole", "mig"], "created_at": "2030-01-01T00:00:00Z"})
        elif item.kind == Kind.SUBJECT:
            state["subjects"].append(body)
        elif item.kind == Kind.POLICY:
            state["policies"].append(body | {"weight": 1, "reserved": {"gpu": 2.0}})
        elif item.kind == Kind.RESERVATION:
            state["reservations"].append(body | {"id": f"rsv_{n}", "start": "2029-12-31T22:00:00Z"})
        else:
            state["tokens"].append(body | {"id": f"tok_{n}", "created_at": "2030-01-01T00:00:00Z"})
    state["tokens"].append({"id": "tok_admin", "role": "admin", "subject": None, "description": "by hand"})
    return ServerState(**state)


def test_plan_creates_then_finds_nothing_to_change() -> None:
    desired = desired_items(validate(Source.parse(GOOD)))
    first = make_plan(desired, [], prune=True)
    assert [(c.action, c.kind) for c in first.changes] == [
        (Action.CREATE, Kind.SUBJECT),
        (Action.CREATE, Kind.POOL),
        (Action.CREATE, Kind.POLICY),
        (Action.CREATE, Kind.RESERVATION),
        (Action.CREATE, Kind.TOKEN),
    ]
    second = make_plan(desired, current_items(server_view(desired)), prune=True)
    assert second.empty, second.changes
    assert len(second.unchanged) == 5


def test_plan_diffs_fields_replaces_reservations_and_prunes_only_what_apply_made() -> None:
    before = desired_items(validate(Source.parse(GOOD)))
    server = server_view(before)
    changed = GOOD.replace("reserved: {gpu: 2}", "reserved: {gpu: 3}").replace(
        "resources: {gpu: 1}", "resources: {gpu: 2}"
    )
    changed = changed.replace("tokens:\n  - {name: ci, role: subject, subject: team-a}\n", "")
    plan = make_plan(desired_items(validate(Source.parse(changed))), current_items(server), prune=True)
    summary = [(c.action, c.kind, c.key) for c in plan.changes]
    assert summary == [
        (Action.DELETE, Kind.TOKEN, "ci"),
        (Action.UPDATE, Kind.POLICY, "team-a@onprem"),
        (Action.REPLACE, Kind.RESERVATION, "eval"),
    ], "the hand-made admin token is not pruned"
    assert [(f.field, f.before, f.after) for f in plan.changes[1].fields] == [("reserved.gpu", 2.0, 3.0)]
    without_prune = make_plan(desired_items(validate(Source.parse(changed))), current_items(server), prune=False)
    assert Action.DELETE not in {c.action for c in without_prune.changes}


def test_plan_frees_before_it_takes() -> None:
    """Shrinking a pool and the policy on it: the policy goes first, or the server refuses the pool."""
    before = desired_items(validate(Source.parse(GOOD)))
    server = server_view(before)
    shrunk = GOOD.replace("gpu: 8", "gpu: 1").replace("reserved: {gpu: 2}", "reserved: {gpu: 1}")
    plan = make_plan(desired_items(validate(Source.parse(shrunk))), current_items(server), prune=False)
    assert [(c.kind, c.action) for c in plan.changes] == [(Kind.POLICY, Action.UPDATE), (Kind.POOL, Action.UPDATE)]
    grown = GOOD.replace("gpu: 8", "gpu: 16").replace("reserved: {gpu: 2}", "reserved: {gpu: 12}")
    plan = make_plan(desired_items(validate(Source.parse(grown))), current_items(server), prune=False)
    assert [(c.kind, c.action) for c in plan.changes] == [(Kind.POOL, Action.UPDATE), (Kind.POLICY, Action.UPDATE)]


def test_draining_and_forms_are_left_to_the_server_unless_given() -> None:
    before = desired_items(validate(Source.parse(GOOD)))
    server = server_view(before)
    server.pools[0]["draining"] = True  # an operator drained it
    assert make_plan(before, current_items(server), prune=False).empty
    explicit = GOOD.replace("gpu_class: a100-80gb", "gpu_class: a100-80gb\n    draining: false")
    (change,) = make_plan(desired_items(validate(Source.parse(explicit))), current_items(server), prune=False).changes
    assert [(f.field, f.before, f.after) for f in change.fields] == [("draining", True, False)]


@pytest.mark.parametrize("name", ["pools.yaml", "demo-pools.yaml"])
def test_example_files_are_valid(name: str) -> None:
    source = Source.read(EXAMPLES / name)
    doc = validate(source)
    assert not check_references(source, doc, {p.name for p in doc.pools}, {s.name for s in doc.subjects})
