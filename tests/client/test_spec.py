"""Keyword arguments to a request spec, the same for ``lease``, ``requires`` and ``respools run``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from respools.client.spec import build_spec


def test_gpu_fractions_mig_slices_and_custom_keys() -> None:
    spec = build_spec(gpu=0.25, mig="3g.40gb", resources={"tensorrt_sessions": 2}, pool="west")
    assert spec.resources == {"gpu": 250, "mig.3g.40gb": 1, "tensorrt_sessions": 2, "step_run": 1}
    assert spec.pools == ["west"]
    counts = build_spec(mig={"1g.10gb": 2}, pool=["a", "b"]).resources
    assert counts["mig.1g.10gb"] == 2


def test_labels_name_the_user_and_host_unless_given() -> None:
    spec = build_spec(gpu=1, labels={"step": "train", "host": "mine"})
    assert spec.labels["step"] == "train" and spec.labels["host"] == "mine" and "user" in spec.labels


def test_asking_for_nothing_or_nonsense_is_refused() -> None:
    with pytest.raises(ValueError, match="ask for at least one resource"):
        build_spec()
    with pytest.raises(ValidationError, match=r"resolution of 0\.001"):
        build_spec(gpu=0.0001)
    with pytest.raises(ValidationError, match="invalid resource key"):
        build_spec(resources={"GPU": 1})
