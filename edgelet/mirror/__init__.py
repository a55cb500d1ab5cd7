"""Reporting the device to a Kubernetes apiserver (Node, Lease, mirror pods, status, events); only with --kubeconfig."""
