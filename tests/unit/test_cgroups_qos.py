"""Table tests of kubelet's QoS class, pod cgroup placement, cpu/memory mapping and OOM score policy."""

import pytest

from edgelet.api.qos import qos_class
from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec, ResourceRequirements
from edgelet.cgroups.qos import (
    PodResources,
    container_resources,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    oom_score_adj,
    pod_cgroup_name,
    pod_cgroup_path,
    pod_resources,
    shares_to_weight,
)

GI = 2**30


def ctr(name="c", requests=None, limits=None, restart_policy=None):
    res = ResourceRequirements(requests=requests, limits=limits) if (requests or limits) else None
    return Container(name=name, image="busybox", resources=res, restart_policy=restart_policy)


def pod(*containers, init=(), priority_class=None, pod_resources_=None):
    return Pod(
        metadata=ObjectMeta(name="p", namespace="default", uid="u"),
        spec=PodSpec(
            containers=list(containers),
            init_containers=list(init) or None,
            priority_class_name=priority_class,
            resources=pod_resources_,
        ),
    )


FULL = {"cpu": "500m", "memory": "128Mi"}

QOS_CASES = [
    ("no resources", pod(ctr()), "BestEffort"),
    ("zero requests", pod(ctr(requests={"cpu": "0", "memory": "0"})), "BestEffort"),
    ("limits only, both", pod(ctr(limits=FULL)), "Guaranteed"),
    ("requests == limits", pod(ctr(requests=FULL, limits=FULL)), "Guaranteed"),
    (
        "equal but spelled differently",
        pod(ctr(requests={"cpu": "0.5", "memory": "134217728"}, limits=FULL)),
        "Guaranteed",
    ),
    ("requests < limits", pod(ctr(requests={"cpu": "100m", "memory": "128Mi"}, limits=FULL)), "Burstable"),
    ("cpu limit only", pod(ctr(limits={"cpu": "1"})), "Burstable"),
    ("requests only", pod(ctr(requests={"memory": "1Gi"})), "Burstable"),
    ("one guaranteed one empty", pod(ctr(limits=FULL), ctr("d")), "Burstable"),
    ("init container counts", pod(ctr(limits=FULL), init=[ctr("i")]), "Burstable"),
    ("init container guaranteed too", pod(ctr(limits=FULL), init=[ctr("i", limits=FULL)]), "Guaranteed"),
    ("extended resources ignored", pod(ctr(limits={**FULL, "example.com/gpu": "1"})), "Guaranteed"),
    ("pod-level resources win", pod(ctr(), pod_resources_=ResourceRequirements(limits=FULL)), "Guaranteed"),
]


@pytest.mark.parametrize(("label", "p", "expected"), QOS_CASES, ids=[c[0] for c in QOS_CASES])
def test_qos_class(label, p, expected):
    assert qos_class(p) == expected


@pytest.mark.parametrize(
    ("root", "qos", "expected"),
    [
        ("/kubepods", "Guaranteed", "/kubepods/podabc"),
        ("/kubepods", "Burstable", "/kubepods/burstable/podabc"),
        ("/kubepods", "BestEffort", "/kubepods/besteffort/podabc"),
        ("kubepods/", "Burstable", "/kubepods/burstable/podabc"),
        ("/", "Guaranteed", "/podabc"),
        ("/edgelet-test-1", "BestEffort", "/edgelet-test-1/besteffort/podabc"),
    ],
)
def test_pod_cgroup_path(root, qos, expected):
    assert pod_cgroup_name("abc") == "podabc"
    assert pod_cgroup_path(root, qos, "abc") == expected


@pytest.mark.parametrize(
    ("milli", "shares"), [(0, 2), (1, 2), (10, 10), (100, 102), (500, 512), (1000, 1024), (10**6, 262144)]
)
def test_milli_cpu_to_shares(milli, shares):
    assert milli_cpu_to_shares(milli) == shares


@pytest.mark.parametrize(("milli", "quota"), [(0, 0), (1, 1000), (5, 1000), (250, 25000), (1500, 150000)])
def test_milli_cpu_to_quota(milli, quota):
    assert milli_cpu_to_quota(milli) == quota


@pytest.mark.parametrize(("shares", "weight"), [(2, 1), (1024, 39), (262144, 10000), (0, 0)])
def test_shares_to_weight(shares, weight):
    assert shares_to_weight(shares) == weight


@pytest.mark.parametrize(
    ("c", "shares", "quota", "memory"),
    [
        (ctr(), 2, 0, 0),
        (ctr(requests={"cpu": "250m"}), 256, 0, 0),
        (ctr(limits={"cpu": "1"}), 1024, 100000, 0),  # no request: shares from the limit
        (ctr(requests={"cpu": "100m"}, limits={"cpu": "2", "memory": "1Gi"}), 102, 200000, GI),
        (ctr(limits={"memory": "100M"}), 2, 0, 100_000_000),
    ],
)
def test_container_resources(c, shares, quota, memory):
    r = container_resources(c)
    assert (r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit) == (shares, quota, 100000, memory)


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (pod(ctr()), PodResources(cpu_shares=2)),
        (
            pod(ctr(limits=FULL), ctr("d", limits=FULL)),
            PodResources(cpu_shares=1024, cpu_quota=100000, cpu_period=100000, memory_limit=256 * 2**20),
        ),
        # Burstable: quota/memory only when every container declares a limit.
        (pod(ctr(requests={"cpu": "100m"}), ctr("d", limits=FULL)), PodResources(cpu_shares=614)),
        (
            pod(ctr(requests={"cpu": "100m"}, limits={"cpu": "1", "memory": "1Gi"})),
            PodResources(cpu_shares=102, cpu_quota=100000, cpu_period=100000, memory_limit=GI),
        ),
        # A plain init container takes the max with the regular ones, it does not add.
        (
            pod(ctr(requests={"cpu": "100m"}), init=[ctr("i", requests={"cpu": "1"})]),
            PodResources(cpu_shares=1024),
        ),
        # A sidecar (restartPolicy Always init container) adds up.
        (
            pod(ctr(requests={"cpu": "500m"}), init=[ctr("s", requests={"cpu": "500m"}, restart_policy="Always")]),
            PodResources(cpu_shares=1024),
        ),
    ],
)
def test_pod_resources(p, expected):
    assert pod_resources(p) == expected


@pytest.mark.parametrize(
    ("p", "capacity", "expected"),
    [
        (pod(ctr(limits=FULL)), 8 * GI, -997),
        (pod(ctr()), 8 * GI, 1000),
        (pod(ctr(), priority_class="system-node-critical"), 8 * GI, -997),
        (pod(ctr(requests={"cpu": "1"})), 8 * GI, 999),  # burstable, no memory request
        (pod(ctr(requests={"memory": "1Gi"})), 8 * GI, 875),
        (pod(ctr(requests={"memory": "8Gi"})), 8 * GI, 3),  # floor for burstable
        (pod(ctr(requests={"memory": "1Gi"})), 0, 999),  # capacity unknown
    ],
)
def test_oom_score_adj(p, capacity, expected):
    assert oom_score_adj(p, p.spec.containers[0], capacity) == expected


@pytest.mark.parametrize(
    ("pod_level", "max_pids", "expected"),
    [
        (None, 1024, 1024),  # --pod-max-pids for every pod
        (None, 0, None),  # unlimited
        (None, -1, None),
        ({"limits": {"pids": "100"}}, 1024, 100),  # the pod's own limit, when lower
        ({"limits": {"pids": 5000}}, 1024, 1024),  # never above the node's
        ({"limits": {"pids": 300}}, -1, 300),
    ],
)
def test_pod_pids_limit(pod_level, max_pids, expected):
    from edgelet.cgroups.qos import pod_pids_limit

    p = pod(ctr(), pod_resources_=ResourceRequirements(**pod_level) if pod_level else None)
    assert pod_pids_limit(p, max_pids) == expected
    assert pod_resources(p, max_pids).pids_limit == expected
