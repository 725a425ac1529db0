"""What-if simulation: replay a trace of steps through the scheduling core and the lease lifecycle on a
simulated clock, once per set of pool definitions, and compare what each would do to waiting times,
utilization, borrowing and preemption.

``trace`` reads and writes the trace format, ``synthetic`` makes traces shaped like a published study,
``replay`` runs one trace against one set of definitions, ``reference`` gives the work-conserving bound,
``report`` turns runs into figures, and ``html`` draws them into one self-contained file.
"""

from respools.whatif.replay import ReplayOptions, RunResult, replay
from respools.whatif.trace import TraceJob, read_trace, write_trace

__all__ = ["ReplayOptions", "RunResult", "TraceJob", "read_trace", "replay", "write_trace"]
