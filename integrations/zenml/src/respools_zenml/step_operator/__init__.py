"""Step operators as respools requesters: a step run through a pooled step operator holds a lease while its
job runs (:class:`PooledStepOperatorBase`; :mod:`.generic` wraps any registered step operator)."""
