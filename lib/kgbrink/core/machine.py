"""What this machine has, read once at start: its memory (a container's limit included), and the driver heap
kgbrink's defaults give it."""

from __future__ import annotations

import os
from pathlib import Path


def machine_memory() -> int | None:
    """This machine's memory in bytes: ``MemTotal`` (``/proc/meminfo``, else ``os.sysconf``), at most the
    memory limit of the process's cgroup (a container's); None when neither can be read."""
    total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if total is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return None
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            total = min(total, int(Path(limit).read_text().strip()))
        except (OSError, ValueError):  # no such cgroup, or "max"
            pass
    return total


def driver_memory_default(total: int | None) -> str:
    """The driver heap for a machine of ``total`` bytes: half of it in whole GiB, 1g to 16g (4g unknown)."""
    if total is None:
        return "4g"
    return f"{min(16, max(1, total // 2 // (1 << 30)))}g"
