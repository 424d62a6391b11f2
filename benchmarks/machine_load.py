"""How busy the rest of the machine was while a benchmark timed something (Linux /proc; shared by the benchmarks).

On a shared machine, other processes' load -- not the code -- can decide whether a target is met,
so every timing carries the cores other processes used meanwhile and the hypervisor's steal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def machine_jiffies() -> tuple[int, int, int]:
    """(busy, steal, total) CPU jiffies of the whole machine since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    busy = user + nice + system + irq + softirq  # guest time is already inside user
    return busy, steal, busy + idle + iowait + steal


def tree_jiffies(root: int) -> int:
    """CPU jiffies of ``root`` and its live descendants, including their reaped children."""
    stats: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based here.
        stats[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0))[1]
        todo.extend(children.get(pid, []))
    return total


@dataclass
class Load:
    """This process tree's CPU seconds, other processes' average cores and the steal share over a window."""

    tree_cpu: float
    other_cores: float
    steal_pct: float


@dataclass(kw_only=True)
class MachineLoad:
    """The load fields of a benchmark's timing: None where /proc is missing."""

    tree_cpu: float | None = None  # this process and its descendants (children, JVMs, Python workers)
    other_cores: float | None = None  # average cores used by every other process on the machine
    steal_pct: float | None = None  # share of the machine's CPU time the hypervisor gave to other guests

    def take(self, load: Load | None) -> None:
        if load is not None:
            self.tree_cpu, self.other_cores, self.steal_pct = load.tree_cpu, load.other_cores, load.steal_pct

    def load_text(self) -> str:
        if self.other_cores is None:
            return "n/a"
        return f"others {self.other_cores:.2f} cores, steal {self.steal_pct:.0f}%"


class LoadMeter:
    """``meter = LoadMeter()`` before the timed work, ``meter.load(seconds)`` after: None where /proc is missing."""

    def __init__(self) -> None:
        try:
            self._start: tuple[tuple[int, int, int], int] | None = (machine_jiffies(), tree_jiffies(os.getpid()))
        except (OSError, ValueError):
            self._start = None

    def load(self, window: float) -> Load | None:
        if self._start is None:
            return None
        (m0, t0), m1, t1 = self._start, machine_jiffies(), tree_jiffies(os.getpid())
        hz = os.sysconf("SC_CLK_TCK")
        tree = (t1 - t0) / hz
        return Load(tree_cpu=tree, other_cores=max(0.0, ((m1[0] - m0[0]) / hz - tree) / max(window, 1e-9)),
                    steal_pct=100.0 * (m1[1] - m0[1]) / max(1, m1[2] - m0[2]))
