"""Works done together: the same kind of write by many callers, in a few set-based statements.

Group commit (:mod:`.group_commit`) gives the works of concurrent API calls one transaction and one
commit, but inside it each work still ran its own statements: ten heartbeats, thirty statements and
thirty round trips. A :class:`Joinable` work also names its :class:`Kind`, and the kind does all the
works of a batch that are of it together: one ``SELECT … IN … FOR UPDATE`` for all their rows, one
``UPDATE … WHERE id IN …`` per set of values written. A kind does only the common case; any work it
cannot vouch for (a missing row, another subject's lease, a duplicate, a state that takes the careful
path) it hands back as :data:`ALONE`, and that work runs by itself, as it would without batching. Run
alone, a work is the reference: its errors, its checks and its answer are defined there, and tests hold
the kinds to it.

**Order.** The works of one batch were all in flight at once: none had been answered when another
began. Any order of them is therefore one the callers could have observed, so a batch may do its joined
kinds first and the rest afterwards, in arrival order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from respools.server.db.transaction import Tx

Item = TypeVar("Item")
T = TypeVar("T")


class Alone(Enum):
    ALONE = "alone"


ALONE = Alone.ALONE
"""A kind's answer for a work it leaves to run by itself."""


class RunAlone(Exception):
    """Raised by a kind that finds, after writing, that it cannot vouch for every outcome (a row it
    checked moved meanwhile): the batch is rolled back and each work runs alone."""


class Kind(ABC, Generic[Item, T]):
    """Does many works of one kind together. Kinds compare equal when their works may be joined."""

    @abstractmethod
    def together(self, tx: Tx, items: Sequence[Item]) -> list[T | Alone]:
        """Each item's outcome, in order, or :data:`ALONE`. Must not raise for one item's sake: a raise
        rolls the whole batch back and runs every work alone."""


@dataclass(frozen=True, slots=True)
class Joinable(Generic[Item, T]):
    """A work that can also be done together with others of its kind."""

    kind: Kind[Item, T]
    item: Item
    alone: Callable[[Tx], T]
    """The work by itself: what runs when it is alone in its batch or its kind hands it back."""

    def __call__(self, tx: Tx) -> T:
        return self.alone(tx)


def run_joined(tx: Tx, works: Sequence[Callable[[Tx], Any]], todo: Sequence[int]) -> tuple[dict[int, Any], list[int]]:
    """Run the joinable works among ``todo`` by kind, where a kind has two or more of them. Returns the
    outcomes done so, by index, and the indices left to run alone, in their order."""
    kinds: dict[Kind[Any, Any], list[tuple[int, Any]]] = {}
    for index in todo:
        work = works[index]
        if isinstance(work, Joinable):
            kinds.setdefault(work.kind, []).append((index, work.item))
    done: dict[int, Any] = {}
    for kind, joined in kinds.items():
        if len(joined) < 2:
            continue
        outcomes = kind.together(tx, [item for _, item in joined])
        for (index, _), outcome in zip(joined, outcomes, strict=True):
            if outcome is not ALONE:
                done[index] = outcome
    return done, [index for index in todo if index not in done]
