"""A description of the machine a benchmark ran on, included in every result."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float:
    try:
        with open("/proc/meminfo") as fh:
            kib = int(fh.readline().split()[1])
        return round(kib / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        return 0.0


def _redis_version() -> str:
    try:
        out = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.split("v=")[1].split()[0]
    except (OSError, IndexError):
        return "unknown"


def describe() -> dict[str, Any]:
    return {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _mem_gib(),
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
        "redis": _redis_version(),
    }
