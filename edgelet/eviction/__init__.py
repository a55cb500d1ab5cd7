"""Node-pressure eviction, as kubelet's eviction manager: signals, thresholds, the eviction order, the manager.

`thresholds` parses the flags, `signals` reads the node (meminfo, the memory
cgroup, statvfs, pids), `decide` is every decision as a pure function, and
`manager` runs them every monitoring interval and acts through callbacks the
app wires (evict a pod, re-admit it, reclaim node-level resources).
"""
