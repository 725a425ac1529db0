"""Finding backends through the ``respools.backends`` entry-point group."""

from __future__ import annotations

from importlib import metadata
from typing import ClassVar

import pytest

from respools.backends import available_backends, get_backend, registry
from respools.backends.local import LocalBackend
from respools.backends.protocol import Backend, BackendError, Realization
from respools.model import Form, Host, Lease, PoolSpec


class ToyBackend(Backend):
    """A third-party backend as a plugin would ship it."""

    name: ClassVar[str] = "toy"
    forms: ClassVar[frozenset[Form]] = frozenset({Form.WHOLE})

    def discover(self, pool: PoolSpec) -> list[Host]:
        return []

    def realize(self, lease: Lease, pool: PoolSpec) -> Realization:
        return Realization(backend=self.name)

    def stop(self, lease: Lease, pool: PoolSpec) -> None:
        return None


class NotABackend:
    name = "odd"


def plugins(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """Make the installed metadata declare exactly these entry points in our group."""
    declared = [metadata.EntryPoint(name=n, value=v, group=registry.GROUP) for n, v in values.items()]

    def entry_points(group: str) -> list[metadata.EntryPoint]:
        return declared if group == registry.GROUP else []

    monkeypatch.setattr(metadata, "entry_points", entry_points)


def test_local_is_registered_in_the_installed_metadata() -> None:
    (entry_point,) = [ep for ep in metadata.entry_points(group="respools.backends") if ep.name == "local"]

    assert entry_point.value == "respools.backends.local:LocalBackend"
    assert available_backends()["local"] is LocalBackend


def test_instances_are_cached() -> None:
    first = get_backend("local")

    assert isinstance(first, LocalBackend)
    assert get_backend("local") is first


def test_unknown_stack_lists_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    plugins(monkeypatch, toy=f"{__name__}:ToyBackend")

    with pytest.raises(BackendError) as caught:
        get_backend("vertex")

    assert str(caught.value) == (
        "unknown stack 'vertex': known backends are local, toy (entry-point group 'respools.backends')"
    )


def test_a_plugin_is_found_by_its_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    plugins(monkeypatch, toy=f"{__name__}:ToyBackend")

    assert available_backends() == {"local": LocalBackend, "toy": ToyBackend}
    assert isinstance(get_backend("toy"), ToyBackend)


def test_a_broken_plugin_does_not_hide_the_others(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plugins(monkeypatch, broken="respools_no_such_plugin:Backend", toy=f"{__name__}:ToyBackend")

    assert set(available_backends()) == {"local", "toy"}
    assert "backend 'broken' (respools_no_such_plugin:Backend) failed to load: ModuleNotFoundError" in caplog.text
    with pytest.raises(BackendError, match="failed to load"):
        get_backend("broken")


def test_an_entry_point_must_name_a_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    plugins(monkeypatch, odd=f"{__name__}:NotABackend", other=f"{__name__}:ToyBackend")

    with pytest.raises(BackendError, match=r"is not a respools\.backends\.Backend subclass"):
        get_backend("odd")
    with pytest.raises(BackendError, match=r"calls itself 'toy'; the entry-point name and Backend\.name must agree"):
        get_backend("other")


def test_the_builtin_backend_is_known_without_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """Running from a source tree (nothing installed) still finds 'local'."""
    plugins(monkeypatch)

    assert available_backends() == {"local": LocalBackend}
