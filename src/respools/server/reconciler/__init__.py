"""The reconciler: the only writer of grants and preemptions (DESIGN §5). One replica leads at a time;
each cycle takes a consistent snapshot, asks the scheduling core, and commits every decision in one
transaction."""

from respools.server.reconciler.loop import Reconciler

__all__ = ["Reconciler"]
