"""Where the CPU goes, per operation (RRC's Figure 3 and Table 3, as far as
one shared 2-CPU machine allows): every thread of the server's processes
and of the two agents is read from /proc/PID/task/TID/stat (utime + stime)
before and after a measured window, charged to a component by its name,
and divided by the operations the client completed in the window.

RRC's Figure 3 breaks its overhead down by switching mechanisms on one
after the other on machines of their own; here the mechanisms share two
CPUs with the clients, so each one's cost shows up as the CPU time of the
threads that do it:

- server: the application's own threads (with the library's recording
  hooks, which run in them, and the kernel work their system calls do:
  in a protected run a reply's trip through the backup's forwarding and
  NFQUEUE starts in the server thread's send);
- log writer: librrc's logging thread (RRC §4.5: batching, sealing and
  sending the record log to the backup);
- library control, snapshot helper: librrc's control thread and the
  pause helper process (checkpoints: pause, copy), with any other process
  in the container's cgroup (what the cgroup counted beyond the threads
  seen: short-lived children);
- primary agent: everything agent a does (epochs: taking, encoding and
  sending checkpoints; acks; heartbeats);
- backup gate: the NFQUEUE reader (every client and server packet, the
  recording of the clients' bytes);
- backup log + release: the thread receiving the record log (verifying
  it, and releasing the replies it covers: the verdicts, and the kernel
  forwarding of each released packet to its client, run there);
- backup checkpoints: receiving and committing checkpoints;
- backup, other: the rest of agent b (heartbeats, status).

The client (rrc-check on the client host) is not counted.
"""
import os
from pathlib import Path

# (component, colour), in stacking order
COMPONENTS = [
    ("server", "0.55"),
    ("log writer", "tab:purple"),
    ("library control", "tab:pink"),
    ("snapshot helper", "tab:brown"),
    ("primary agent", "tab:blue"),
    ("backup gate", "tab:orange"),
    ("backup log + release", "tab:red"),
    ("backup checkpoints", "tab:olive"),
    ("backup, other", "tab:gray"),
]
PRIMARY_SIDE = ("server", "log writer", "library control", "snapshot helper", "primary agent")


def task_cpu(pid):
    """{tid: (comm, cpu ms)} of every thread of `pid` (empty if it is gone)."""
    out = {}
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            raw = Path(f"/proc/{pid}/task/{t}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        f = raw.rsplit(")", 1)[1].split()
        out[int(t)] = (comm, (int(f[11]) + int(f[12])) * 1000.0 / ticks)
    return out


def classify(role, comm):
    """The component a thread's CPU goes to."""
    if role == "server":
        return {"rrc-log-writer": "log writer", "rrc-control": "library control",
                "rrc-pause": "snapshot helper"}.get(comm, "server")
    if role == "primary agent":
        return "primary agent"
    if comm.startswith("rrc-gate"):
        return "backup gate"
    if comm == "log-in":
        return "backup log + release"
    if comm == "repl-in" or comm.startswith("commit-"):
        return "backup checkpoints"
    return "backup, other"


def take(server_pids, agent_pids):
    """{(role, tid): (component, ms)} now. `agent_pids`: {"primary agent":
    pid, "backup agent": pid} (either may be missing)."""
    snap = {}
    for pid in server_pids:
        for tid, (comm, ms) in task_cpu(pid).items():
            snap[("server", tid)] = (classify("server", comm), ms)
    for role, pid in agent_pids.items():
        if pid:
            for tid, (comm, ms) in task_cpu(pid).items():
                snap[(role, tid)] = (classify(role, comm), ms)
    return snap


def per_op(before, after, ops, server_cgroup_ms=None):
    """µs of CPU per operation by component over the window. A thread
    that started in it counts from 0; `server_cgroup_ms` (the container's
    cgroup over the window) adds what its threads seen do not account for
    to the snapshot helper (fork snapshot children, ended processes)."""
    if not ops:
        return None
    ms = {c: 0.0 for c, _ in COMPONENTS}
    for key, (comp, t1) in after.items():
        t0 = before.get(key, (comp, 0.0))[1]
        ms[comp] += max(0.0, t1 - t0)
    if server_cgroup_ms is not None:
        seen = sum(ms[c] for c in ("server", "log writer", "library control", "snapshot helper"))
        ms["snapshot helper"] += max(0.0, server_cgroup_ms - seen)
    return {c: v * 1000.0 / ops for c, v in ms.items()}


def host_cpu_pct(us_per_op, ops_per_s):
    """Table 3: % of one CPU on the primary's side (server, library, agent
    a) and on the backup's (agent b) at `ops_per_s`."""
    if not us_per_op:
        return None
    prim = sum(us_per_op[c] for c in PRIMARY_SIDE)
    back = sum(v for c, v in us_per_op.items() if c not in PRIMARY_SIDE)
    return {"primary": prim * ops_per_s / 1e4, "backup": back * ops_per_s / 1e4}


def plot_panel(a, results, names, keys, window, title):
    """Stacked bars: per server, the unprotected run then each protected
    configuration, µs of CPU per operation by component."""
    import numpy as np
    x = np.arange(len(names))
    nb = 1 + len(keys)
    w = 0.8 / nb
    for j in range(nb):
        bottoms = np.zeros(len(names))
        for comp, colour in COMPONENTS:
            vals = []
            for n in names:
                side = results[n]["unprotected"] if j == 0 else results[n]["protected"][keys[j - 1]]
                b = (side.get(window) or {}).get("cpu_us_per_op") or {}
                vals.append(b.get(comp, 0.0))
            a.bar(x - 0.4 + w / 2 + j * w, vals, w, bottom=bottoms, color=colour, edgecolor="k", lw=0.2,
                  label=comp if j == 1 else None)
            bottoms += np.array(vals)
        for i, tot in enumerate(bottoms):
            a.annotate(f"{tot:.0f}\n{'unprot.' if j == 0 else keys[j - 1]}", (x[i] - 0.4 + w / 2 + j * w, tot),
                       ha="center", va="bottom", fontsize=6)
    a.set_xticks(x, names)
    a.set_title(title)
    a.set_ylabel("µs of CPU per operation")
    a.legend(fontsize=7, ncol=2)
