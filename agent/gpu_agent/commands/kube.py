"""The Kubernetes flags that `run` and `trace` share (k8s.py reads them: from_args)."""

from __future__ import annotations

from ..system import k8s
from .common import duration


def add_arguments(p) -> None:
    g = p.add_argument_group("Kubernetes metadata (pod, namespace, container labels)")
    g.add_argument(
        "--kube-pods-url",
        default="auto",
        metavar="URL|auto|off",
        help="where the pods of this node come from: 'auto' (default: the API server "
        "filtered by spec.nodeName when running in a pod, else off), 'off', or a "
        "PodList URL such as the kubelet's https://$NODE_IP:10250/pods",
    )
    g.add_argument("--node-name", default=None, help="this node's name for 'auto' (default: $NODE_NAME)")
    g.add_argument(
        "--kube-token-file", default=None, help=f"bearer token file (default: {k8s.SA_DIR}/token when present)"
    )
    g.add_argument(
        "--kube-ca-file", default=None, help=f"CA bundle for https (default: {k8s.SA_DIR}/ca.crt when present)"
    )
    g.add_argument(
        "--kube-insecure-skip-tls-verify",
        action="store_true",
        default=False,
        help="do not verify the server certificate (kubelets with self-signed certificates)",
    )
    g.add_argument(
        "--kube-refresh",
        default=30.0,
        type=duration,
        help="pod list refresh period (default 30s; new containers trigger an early one)",
    )
