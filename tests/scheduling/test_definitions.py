"""Bad definitions are refused with the field at fault."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from respools.model import PolicySpec, PoolSpec, RequestSpec, parse_resources
from respools.scheduling import DefinitionError, check_policy, check_pool

from .sim import policy, pool


def test_reserved_above_limit_is_refused_by_the_schema() -> None:
    with pytest.raises(ValidationError, match=r"exceeds limit\.gpu"):
        PolicySpec.model_validate({"subject": "a", "pool": "p", "reserved": {"gpu": 4}, "limit": {"gpu": 2}})


def test_reserved_shares_may_not_add_up_beyond_capacity() -> None:
    p = pool("p", gpu=8)
    existing = [policy("a", "p", reserved={"gpu": 6})]
    with pytest.raises(DefinitionError) as err:
        check_policy(policy("b", "p", reserved={"gpu": 3}), p, existing)
    assert err.value.field == "reserved.gpu"
    check_policy(policy("b", "p", reserved={"gpu": 2}), p, existing)
    # A subject's own policy is replaced, not added to: a alone may reserve the whole pool.
    check_policy(policy("a", "p", reserved={"gpu": 8}), p, existing)


def test_policy_key_the_pool_lacks_is_refused() -> None:
    with pytest.raises(DefinitionError) as err:
        check_policy(policy("a", "p", limit={"tensorrt_sessions": 2}), pool("p", gpu=8), [])
    assert err.value.field == "limit.tensorrt_sessions"


def mig_pool(profile: str, forms: list[str] | None = None) -> PoolSpec:
    return PoolSpec.model_validate({"name": "p", "capacity": {f"mig.{profile}": 2}, "forms": forms})


def test_unknown_mig_profile_in_a_capacity_pool_is_refused() -> None:
    with pytest.raises(DefinitionError) as err:
        check_pool(mig_pool("9g.99gb"))
    assert err.value.field == "capacity.mig.9g.99gb"
    check_pool(mig_pool("3g.40gb"))


def test_mig_on_a_pool_whose_forms_exclude_it_is_refused() -> None:
    with pytest.raises(DefinitionError, match="forms do not include 'mig'"):
        check_pool(mig_pool("3g.40gb", forms=["whole"]))


def test_wire_amounts() -> None:
    assert parse_resources({"gpu": 0.25, "mcpu": 4000}) == {"gpu": 250, "mcpu": 4000}
    for bad in ({"gpu": -1}, {"gpu": 0.0001}, {"mcpu": 1.5}, {"Bad Key": 1}, {"gpu": "x"}, {"gpu": True}):
        with pytest.raises(ValueError):
            parse_resources(bad)
    with pytest.raises(ValidationError, match="at least one resource"):
        RequestSpec.model_validate({"resources": {}})
    spec = RequestSpec.model_validate({"resources": {"gpu": 0.5}})
    assert spec.model_dump()["resources"] == {"gpu": 0.5, "step_run": 1}
