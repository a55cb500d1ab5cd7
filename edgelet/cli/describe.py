"""kubectl's views of pods from the pods snapshot: `get -o wide|yaml|json` and `describe pod` (pure formatting).

Layouts follow kubectl: describe.go (describePod, describeContainers,
describeStatus, describeVolumes, DescribeEvents) printed through a Go
text/tabwriter (minwidth 0, tabwidth 8, padding 2), get.go's `-o wide`
columns, and a `v1 List` for several objects in yaml/json.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgelet.events import Event
    from edgelet.status.snapshot import PodRow, PodsSnapshot

NONE = "<none>"


# --- Go text/tabwriter ---------------------------------------------------------


def go_tabwrite(text: str, padding: int = 2) -> str:
    """`text` aligned as Go's tabwriter.NewWriter(out, 0, 8, padding, ' ', 0) prints it.

    A cell is text terminated by a tab; a column block is a run of
    consecutive lines having a cell in that column, padded to its widest
    cell. The text after a line's last tab is not a cell and is not padded.
    """
    lines = [line.split("\t") for line in text.split("\n")]
    out: list[str] = []
    widths: list[int] = []

    def write(line0: int, line1: int) -> None:
        for cells in lines[line0:line1]:
            parts = []
            for j, cell in enumerate(cells):
                if j < len(cells) - 1 and j < len(widths):
                    parts.append(cell.ljust(widths[j]))
                else:
                    parts.append(cell)
            out.append("".join(parts))

    def fmt(line0: int, line1: int) -> None:
        column = len(widths)
        this = line0
        while this < line1:
            if column >= len(lines[this]) - 1:
                this += 1
                continue
            write(line0, this)
            line0 = this
            width = 0
            while this < line1 and column < len(lines[this]) - 1:
                width = max(width, len(lines[this][column]) + padding)
                this += 1
            widths.append(width)
            fmt(line0, this)
            widths.pop()
            line0 = this
        write(line0, line1)

    fmt(0, len(lines))
    return "\n".join(out)


# --- durations and times ---------------------------------------------------------


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery duration.HumanDuration, as describe's event ages use it."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{hours // (24 * 365)}y"


def rfc1123z(stamp: str | None) -> str:
    """An RFC 3339 API time as Go's time.RFC1123Z prints it (in UTC: the device's local zone is not the reader's)."""
    if not stamp:
        return ""
    try:
        t = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return stamp
    return t.strftime("%a, %d %b %Y %H:%M:%S +0000")


# --- get -o wide / yaml / json -----------------------------------------------------


def pod_objects(rows: Iterable[PodRow]) -> list[dict[str, Any]]:
    """The full Pod objects of the rows (a snapshot of an older agent has none: a stub from the row)."""
    out = []
    for r in rows:
        if r.pod is not None:
            out.append(r.pod)
        else:
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": r.name, "namespace": r.namespace, "uid": r.uid},
                    "status": {"phase": r.phase},
                }
            )
    return out


def as_list(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """kubectl's wrapper for several objects."""
    return {"apiVersion": "v1", "items": objects, "kind": "List", "metadata": {"resourceVersion": ""}}


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=4, sort_keys=True, ensure_ascii=False) + "\n"


def to_yaml(obj: Any) -> str:
    import yaml

    return yaml.safe_dump(obj, default_flow_style=False, sort_keys=True, allow_unicode=True)


def readiness_gates_column(pod: dict[str, Any] | None) -> str:
    """kubectl's READINESS GATES column: `<none>` or `ready/total`."""
    gates = ((pod or {}).get("spec") or {}).get("readinessGates") or []
    if not gates:
        return NONE
    conds = {c.get("type"): c.get("status") for c in ((pod or {}).get("status") or {}).get("conditions") or []}
    ready = sum(1 for g in gates if conds.get(g.get("conditionType")) == "True")
    return f"{ready}/{len(gates)}"


def wide_columns(row: PodRow) -> list[str]:
    """IP, NODE, NOMINATED NODE, READINESS GATES, as `kubectl get pods -o wide` adds them."""
    pod = row.pod or {}
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName") or NONE
    return [status.get("podIP") or NONE, node, status.get("nominatedNodeName") or NONE, readiness_gates_column(pod)]


# --- describe pod ---------------------------------------------------------------


def find_pods(snapshot: PodsSnapshot, name: str, namespace: str | None) -> list[PodRow]:
    """Rows named `name`, or `name-<node>` (a static pod's name without its node suffix)."""
    wanted = {name, f"{name}-{snapshot.node_name}"}
    return [r for r in snapshot.pods if r.name in wanted and (namespace is None or r.namespace == namespace)]


class _Writer:
    """kubectl's PrefixWriter: LEVEL_n indents by 2n spaces; the tabwriter runs over it all at the end."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.flushed: list[str] = []

    def w(self, level: int, text: str) -> None:
        self.parts.append("  " * level + text)

    def flush(self) -> None:
        self.flushed.append(go_tabwrite("".join(self.parts)))
        self.parts = []

    def text(self) -> str:
        self.flush()
        return "".join(self.flushed)


def _multiline(w: _Writer, title: str, values: dict[str, str] | None, sep: str) -> None:
    w.w(0, f"{title}:\t")
    if not values:
        w.w(0, NONE + "\n")
        return
    for i, key in enumerate(sorted(values)):
        if i:
            w.w(0, "\t")
        value = str(values[key]).rstrip("\n")
        w.w(0, f"{key}{sep}{value}\n")


def _probe(probe: dict[str, Any], pod_ip: str) -> str:
    attrs = (
        f"delay={probe.get('initialDelaySeconds', 0)}s timeout={probe.get('timeoutSeconds', 1)}s "
        f"period={probe.get('periodSeconds', 10)}s #success={probe.get('successThreshold', 1)} "
        f"#failure={probe.get('failureThreshold', 3)}"
    )
    if "exec" in probe:
        return f"exec [{' '.join((probe['exec'] or {}).get('command') or [])}] {attrs}"
    if "httpGet" in probe:
        h = probe["httpGet"] or {}
        scheme = (h.get("scheme") or "HTTP").lower()
        host = h.get("host") or ""
        return f"http-get {scheme}://{host}:{h.get('port')}{h.get('path') or ''} {attrs}"
    if "tcpSocket" in probe:
        t = probe["tcpSocket"] or {}
        return f"tcp-socket {t.get('host') or ''}:{t.get('port')} {attrs}"
    if "grpc" in probe:
        g = probe["grpc"] or {}
        return f"grpc <pod>:{g.get('port')} {g.get('service') or ''} {attrs}"
    return f"unknown {attrs}"


def _state(w: _Writer, name: str, state: dict[str, Any] | None) -> None:
    state = state or {}
    if "running" in state:
        w.w(2, f"{name}:\tRunning\n")
        w.w(3, f"Started:\t{rfc1123z((state['running'] or {}).get('startedAt'))}\n")
    elif "terminated" in state:
        t = state["terminated"] or {}
        w.w(2, f"{name}:\tTerminated\n")
        if t.get("reason"):
            w.w(3, f"Reason:\t{t['reason']}\n")
        if t.get("message"):
            w.w(3, f"Message:\t{t['message']}\n")
        w.w(3, f"Exit Code:\t{t.get('exitCode', 0)}\n")
        if t.get("signal"):
            w.w(3, f"Signal:\t{t['signal']}\n")
        w.w(3, f"Started:\t{rfc1123z(t.get('startedAt'))}\n")
        w.w(3, f"Finished:\t{rfc1123z(t.get('finishedAt'))}\n")
    else:
        w.w(2, f"{name}:\tWaiting\n")
        reason = (state.get("waiting") or {}).get("reason")
        if reason:
            w.w(3, f"Reason:\t{reason}\n")


def _ports(ports: list[dict[str, Any]], key: str) -> str:
    return ",".join(f"{p.get(key)}/{p.get('protocol') or 'TCP'}" for p in ports if p.get(key))


def _containers(
    w: _Writer,
    title: str,
    containers: list[dict],
    statuses: list[dict],
    pod_ip: str,
    pulls: Mapping[str, Sequence[int]] | None = None,
) -> None:
    w.w(0, f"{title}:\n")
    by_name = {s.get("name"): s for s in statuses}
    for c in containers:
        status = by_name.get(c.get("name"))
        w.w(1, f"{c.get('name')}:\n")
        if status is not None:
            w.w(2, f"Container ID:\t{status.get('containerID') or ''}\n")
        w.w(2, f"Image:\t{c.get('image') or ''}\n")
        if status is not None:
            w.w(2, f"Image ID:\t{status.get('imageID') or ''}\n")
        ports = _ports(c.get("ports") or [], "containerPort")
        w.w(2, f"Ports:\t{ports}\n" if "," in ports else f"Port:\t{ports or NONE}\n")
        host_ports = _ports(c.get("ports") or [], "hostPort")
        w.w(2, f"Host Ports:\t{host_ports}\n" if "," in host_ports else f"Host Port:\t{host_ports or NONE}\n")
        for key, label in (("command", "Command"), ("args", "Args")):
            if c.get(key):
                w.w(2, f"{label}:\n")
                for arg in c[key]:
                    for line in str(arg).split("\n"):
                        w.w(3, f"{line}\n")
        if status is not None:
            _state(w, "State", status.get("state"))
            pull = (pulls or {}).get(c.get("image") or "")
            if pull is not None and "waiting" in (status.get("state") or {"waiting": {}}):
                from edgelet.cli.progress import pull_text

                w.w(3, f"Pulling:\t{pull_text(pull[0], pull[1])}\n")
            last = status.get("lastState") or {}
            if last.get("terminated"):
                _state(w, "Last State", last)
            w.w(2, f"Ready:\t{'True' if status.get('ready') else 'False'}\n")
            w.w(2, f"Restart Count:\t{status.get('restartCount', 0)}\n")
        resources = c.get("resources") or {}
        for key, label in (("limits", "Limits"), ("requests", "Requests")):
            if resources.get(key):
                w.w(2, f"{label}:\n")
                for rname in sorted(resources[key]):
                    w.w(3, f"{rname}:\t{resources[key][rname]}\n")
        for key, label in (("livenessProbe", "Liveness"), ("readinessProbe", "Readiness"), ("startupProbe", "Startup")):
            if c.get(key):
                w.w(2, f"{label}:\t{_probe(c[key], pod_ip)}\n")
        env = c.get("env") or []
        w.w(2, "Environment:" + ("\t<none>" if not env else "") + "\n")
        for e in env:
            if "valueFrom" not in e:
                for i, line in enumerate(str(e.get("value") or "").split("\n")):
                    w.w(3, f"{e.get('name')}:\t{line}\n" if i == 0 else f"\t{line}\n")
                continue
            source = e["valueFrom"] or {}
            field = source.get("fieldRef") or {}
            if field:
                w.w(3, f"{e.get('name')}:\t ({field.get('apiVersion') or 'v1'}:{field.get('fieldPath')})\n")
            else:
                w.w(3, f"{e.get('name')}:\t<set from {next(iter(source), 'unknown')}>\n")
        mounts = sorted(c.get("volumeMounts") or [], key=lambda m: m.get("mountPath") or "")
        w.w(2, "Mounts:" + ("\t<none>" if not mounts else "") + "\n")
        for m in mounts:
            flags = ["ro" if m.get("readOnly") else "rw"]
            if m.get("subPath"):
                flags.append("path=" + json.dumps(m["subPath"]))
            w.w(3, f"{m.get('mountPath')} from {m.get('name')} ({','.join(flags)})\n")


def _volumes(w: _Writer, volumes: list[dict[str, Any]]) -> None:
    if not volumes:
        w.w(0, "Volumes:\t<none>\n")
        return
    w.w(0, "Volumes:\n")
    for v in volumes:
        w.w(1, f"{v.get('name')}:\n")
        if "hostPath" in v:
            hp = v["hostPath"] or {}
            w.w(2, "Type:\tHostPath (bare host directory volume)\n")
            w.w(2, f"Path:\t{hp.get('path')}\n")
            w.w(2, f"HostPathType:\t{hp.get('type') or ''}\n")
        elif "emptyDir" in v:
            ed = v["emptyDir"] or {}
            w.w(2, "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)\n")
            w.w(2, f"Medium:\t{ed.get('medium') or ''}\n")
            w.w(2, f"SizeLimit:\t{ed.get('sizeLimit') or '<unset>'}\n")
        elif "configMap" in v:
            cm = v["configMap"] or {}
            w.w(2, "Type:\tConfigMap (a volume populated by a ConfigMap)\n")
            w.w(2, f"Name:\t{cm.get('name') or ''}\n")
            w.w(2, f"Optional:\t{'true' if cm.get('optional') else 'false'}\n")
        elif "secret" in v:
            sec = v["secret"] or {}
            w.w(2, "Type:\tSecret (a volume populated by a Secret)\n")
            w.w(2, f"SecretName:\t{sec.get('secretName') or ''}\n")
            w.w(2, f"Optional:\t{'true' if sec.get('optional') else 'false'}\n")
        elif "projected" in v:
            w.w(2, "Type:\tProjected (a volume that contains injected data from multiple sources)\n")
            for src in (v["projected"] or {}).get("sources") or []:
                for kind, label in (("configMap", "ConfigMapName"), ("secret", "SecretName")):
                    if kind in src:
                        w.w(2, f"{label}:\t{(src[kind] or {}).get('name') or ''}\n")
        else:
            w.w(1, "<unknown>\n")


def _tolerations(w: _Writer, tolerations: list[dict[str, Any]]) -> None:
    w.w(0, "Tolerations:\t")
    if not tolerations:
        w.w(0, NONE + "\n")
        return
    for i, t in enumerate(tolerations):
        if i:
            w.w(0, "\t")
        text = t.get("key") or ""
        if t.get("value"):
            text += f"={t['value']}"
        if t.get("effect"):
            text += f":{t['effect']}"
        if t.get("operator") == "Exists" and not t.get("value"):
            text += " op=Exists" if (t.get("key") or t.get("effect")) else "op=Exists"
        if t.get("tolerationSeconds") is not None:
            text += f" for {t['tolerationSeconds']}s"
        w.w(0, text + "\n")


def _events(w: _Writer, events: Sequence[Event], now: float) -> None:
    if not events:
        w.w(0, "Events:\t<none>\n")
        return
    w.flush()
    w.w(0, "Events:\n  Type\tReason\tAge\tFrom\tMessage\n")
    w.w(1, "----\t------\t----\t----\t-------\n")
    for e in sorted(events, key=lambda e: e.last_timestamp):
        first = human_duration(now - e.first_timestamp)
        if e.count > 1:
            age = f"{human_duration(now - e.last_timestamp)} (x{e.count} over {first})"
        else:
            age = first
        w.w(1, f"{e.type}\t{e.reason}\t{age}\tkubelet\t{e.message.strip()}\n")


def _objects(w: _Writer, pod_name: str, objects: Sequence[Any]) -> None:
    """The ConfigMaps and Secrets the pod uses (edgelet's own section): keys and sizes, never a value."""
    used = [o for o in objects if any(u.startswith(f"{pod_name} (") for u in o.used_by)]
    if not used:
        return
    w.w(0, "ConfigMaps and Secrets:\n")
    for o in used:
        keys = ", ".join(f"{k} ({n} bytes)" for k, n in o.keys.items()) or "<no keys>"
        where = "<missing>" if o.missing else o.origin
        w.w(1, f"{o.kind} {o.name}:\t{keys}\t{where}\n")


def describe_pod(
    pod: dict[str, Any],
    events: Sequence[Event],
    now: float,
    pulls: Mapping[str, Sequence[int]] | None = None,
    runtime_handler: str = "",
    objects: Sequence[Any] = (),
) -> str:
    """`kubectl describe pod` of one Pod object (as the snapshot holds it) and its events; a container waiting
    for a pull under way (`pulls`: image -> [done, total]) shows how far it is. `runtime_handler`: the one its
    sandbox runs under (kubelet's pods have no such line: their RuntimeClass object names it); `objects`
    (ObjectReports from the agent) the ConfigMaps and Secrets it uses."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    w = _Writer()
    w.w(0, f"Name:\t{meta.get('name', '')}\n")
    w.w(0, f"Namespace:\t{meta.get('namespace', '')}\n")
    if spec.get("priority") is not None:
        w.w(0, f"Priority:\t{spec['priority']}\n")
    if spec.get("priorityClassName"):
        w.w(0, f"Priority Class Name:\t{spec['priorityClassName']}\n")
    if spec.get("runtimeClassName"):
        w.w(0, f"Runtime Class Name:\t{spec['runtimeClassName']}\n")
    if runtime_handler:
        w.w(0, f"Runtime Handler:\t{runtime_handler}\n")
    if spec.get("serviceAccountName"):
        w.w(0, f"Service Account:\t{spec['serviceAccountName']}\n")
    node = spec.get("nodeName")
    w.w(0, f"Node:\t{node}/{status.get('hostIP') or ''}\n" if node else "Node:\t<none>\n")
    if status.get("startTime"):
        w.w(0, f"Start Time:\t{rfc1123z(status['startTime'])}\n")
    _multiline(w, "Labels", meta.get("labels"), "=")
    _multiline(w, "Annotations", meta.get("annotations"), ": ")
    if meta.get("deletionTimestamp"):
        w.w(0, "Status:\tTerminating\n")
        w.w(0, f"Termination Grace Period:\t{spec.get('terminationGracePeriodSeconds', 30)}s\n")
    else:
        w.w(0, f"Status:\t{status.get('phase') or ''}\n")
    if status.get("reason"):
        w.w(0, f"Reason:\t{status['reason']}\n")
    if status.get("message"):
        w.w(0, f"Message:\t{status['message']}\n")
    pod_ip = status.get("podIP") or ""
    w.w(0, f"IP:\t{pod_ip}\n")
    ips = status.get("podIPs") or []
    if not ips:
        w.w(0, "IPs:\t<none>\n")
    else:
        w.w(0, "IPs:\n")
        for ip in ips:
            w.w(1, f"IP:\t{ip.get('ip')}\n")
    if spec.get("initContainers"):
        _containers(
            w, "Init Containers", spec["initContainers"], status.get("initContainerStatuses") or [], pod_ip, pulls
        )
    _containers(w, "Containers", spec.get("containers") or [], status.get("containerStatuses") or [], pod_ip, pulls)
    gates = spec.get("readinessGates") or []
    conditions = status.get("conditions") or []
    if gates:
        w.w(0, "Readiness Gates:\n  Type\tStatus\n")
        by_type = {c.get("type"): c.get("status") for c in conditions}
        for g in gates:
            w.w(1, f"{g.get('conditionType')} \t{by_type.get(g.get('conditionType'), NONE)} \n")
    if conditions:
        w.w(0, "Conditions:\n  Type\tStatus\n")
        for c in conditions:
            w.w(1, f"{c.get('type')} \t{c.get('status')} \n")
    rollout = next((c for c in conditions if c.get("type") == "edgelet.io/Rollout"), None)
    if rollout is not None:  # edgelet's health-gated rollout (RolledBack, RolloutPulling, ...) and why
        w.w(0, f"Rollout:\t{rollout.get('reason') or ''}: {rollout.get('message') or ''}\n")
    _volumes(w, spec.get("volumes") or [])
    _objects(w, f"{meta.get('namespace', '')}/{meta.get('name', '')}", objects)
    w.w(0, f"QoS Class:\t{status.get('qosClass') or ''}\n")
    _multiline(w, "Node-Selectors", spec.get("nodeSelector"), "=")
    _tolerations(w, spec.get("tolerations") or [])
    _events(w, events, now)
    return w.text()
