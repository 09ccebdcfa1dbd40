"""The machine's free memory, read between saturation rounds: an e-graph that a rule makes
explode can take every byte in a few rounds, and the kernel's OOM killer then ends the
whole process (a CI job, a notebook) with no report. Stopping at a floor of free memory
turns that into an `unknown` verdict that names the limit."""

from __future__ import annotations

from pathlib import Path

MEMINFO = Path("/proc/meminfo")
# Stop when less than this share of the machine's memory is free.
MIN_FREE_SHARE = 0.1


def _meminfo() -> dict[str, int]:
    """`/proc/meminfo` in bytes, or {} where there is none (not Linux)."""
    try:
        lines = MEMINFO.read_text().splitlines()
    except OSError:
        return {}
    info = {}
    for line in lines:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            info[name] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return info


def memory_low(min_free_share: float = MIN_FREE_SHARE) -> str:
    """Why the run must stop for memory ("" while there is enough): the machine's available
    memory is under `min_free_share` of its total."""
    info = _meminfo()
    total, free = info.get("MemTotal"), info.get("MemAvailable")
    if not total or free is None or free >= min_free_share * total:
        return ""
    gib = 1 << 30
    return (
        f"the machine's free memory fell to {free / gib:.1f} GiB of {total / gib:.1f} GiB "
        f"(the floor is {min_free_share * 100:g}%)"
    )
