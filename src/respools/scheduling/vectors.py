"""Arithmetic on resource vectors (``dict[str, int]``). Plain functions over dicts keep the hot loop
free of object overhead."""

from __future__ import annotations

from collections.abc import Mapping

Vector = dict[str, int]


def add_into(target: Vector, other: Mapping[str, int], sign: int = 1) -> None:
    for key, amount in other.items():
        target[key] = target.get(key, 0) + sign * amount


def scaled(vector: Mapping[str, int], factor: int) -> Vector:
    return {k: v * factor for k, v in vector.items()} if factor != 1 else dict(vector)


def dominates(big: Mapping[str, int], small: Mapping[str, int]) -> bool:
    """Whether ``big`` asks for at least as much as ``small`` on every key of ``small``."""
    for key, amount in small.items():  # noqa: SIM110 (a loop: all(genexpr) costs twice as much here)
        if big.get(key, 0) < amount:
            return False
    return True
