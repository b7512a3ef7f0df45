"""The local stack listens on loopback only: every service on its port, none beyond 127.0.0.0/8."""

from __future__ import annotations

import ipaddress

import psutil

from tests.cluster.jobs import stack_module


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def test_the_stack_listens_on_loopback_only(stack):
    pids = {}
    for name in stack_module.service_names(stack):
        for pid in stack_module.group_pids(stack_module.running(stack, name)):
            pids[pid] = name
    listening = [c for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.pid in pids]
    found = {(pids[c.pid], c.laddr.port) for c in listening}
    # every service is seen listening on its port (the check below looks at real sockets) ...
    expected = {("s3", stack.s3_port), ("mlflow", stack.mlflow_port), ("spark-master", stack.master_port)}
    expected |= {("spark-master", stack.master_ui_port)}
    for index in range(1, stack.workers + 1):
        expected |= {(f"spark-worker-{index}", port) for port in stack.worker_ports(index)}
    assert expected <= found, expected - found
    # ... and none of the stack's processes listens beyond 127.0.0.0/8
    outside = [(pids[c.pid], c.laddr) for c in listening if not _loopback(c.laddr.ip)]
    assert outside == []
