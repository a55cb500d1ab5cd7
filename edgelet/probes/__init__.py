"""Container probes (startup, liveness, readiness) and lifecycle hooks: state machine, probers, manager.

Layout, as kubelet's prober/ and lifecycle/ packages:

- `machine.py`: the per-probe state machine (thresholds, initial delay, the
  startup gate, hold after a liveness/startup failure) and the results
  cache; pure, time passed in.
- `netns.py`: sockets opened inside a pod's network namespace.
- `probers.py`: exec (`runc exec`), httpGet, tcpSocket and grpc probes, each
  returning an `Outcome`; `hooks.py`: postStart/preStop handlers.
- `manager.py`: one asyncio task per probe of each running container.
"""

from edgelet.probes.machine import ProbeMachine, ProbeParams, Result, ResultsCache, initial_result

__all__ = ["ProbeMachine", "ProbeParams", "Result", "ResultsCache", "initial_result"]
