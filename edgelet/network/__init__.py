"""Pod networking through CNI: conflists, the plugins' exec protocol, network namespaces as files, cached results.

`conf` and `result` are pure (the conflist and what plugins answer);
`cni` runs the plugin chain (ADD, DEL, CHECK) as the CNI spec and libcni do;
`netns` makes and removes a pod's network namespace, a bind-mounted file
under the run dir (never /proc/<pid>/ns/net: after a reboot a pid can be
someone else's); `cache` keeps what DEL needs, written crash-safely before
any container starts, so a pod's addresses and rules are released even after
a SIGKILL or a power cut.
"""
