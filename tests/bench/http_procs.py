"""Processes of the end-to-end HTTP benchmark: CPU seconds of a process tree read from
``/proc``, and nginx serving a folder (installed from Debian's archive when missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.fixtures.ports import LOCALHOST, PortTakenError, listening_port, start_on_free_port

_TICK: Final = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime + stime in seconds) of ``pid``; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15 (cutime/cstime excluded)
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def tree_cpu_s(root: int) -> float:
    """utime + stime of ``root`` and of its live descendants (workers of nginx, or of a server
    with several worker processes), without the children's waited-for times."""
    return sum(stat[1] for pid in tree_pids(root) if (stat := _stat(pid)) is not None)


def tree_pids(root: int) -> list[int]:
    """``root`` and its live descendants."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                parents[int(name)] = stat[0]
    out = []
    for pid in parents:
        p = pid
        while p > 1:
            if p == root:
                out.append(pid)
                break
            p = parents.get(p, 0)
    return out


def pss_mib(pid: int) -> float:
    """The proportional set size of ``pid`` (``/proc/PID/smaps_rollup``), MiB; 0 once gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree_pss_mib(root: int) -> tuple[float, list[float]]:
    """The summed PSS of ``root``'s tree and each process's, MiB."""
    each = [pss_mib(pid) for pid in sorted(tree_pids(root))]
    return sum(each), each


def self_cpu_s() -> float:
    """This process's CPU seconds (every thread)."""
    t = os.times()
    return t.user + t.system


@dataclass(slots=True)
class Nginx:
    proc: subprocess.Popen[bytes]
    url: str
    folder: Path

    def stop(self) -> None:
        end(self.proc)


def end(proc: subprocess.Popen[bytes], timeout_s: float = 10) -> None:
    """SIGTERM, then SIGKILL once ``timeout_s`` has passed."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def nginx_binary() -> str | None:
    """nginx's path; installed with apt-get (nginx-light, else nginx) when missing and this
    process may; None when neither worked."""
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for package in ("nginx-light", "nginx"):
        done = subprocess.run(["apt-get", "install", "-y", "-q", package], env=env, check=False)
        if done.returncode == 0:
            break
    return shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )


_CONF: Final = """\
daemon off;
master_process on;
{user}
worker_processes {workers};
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush off;  # with sendfile, TCP_CORK stalls unaligned ranges ~40 ms (bench_s3)
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    default_type application/octet-stream;
    server {{
        listen {host}:{port};
        root {root};
    }}
}}
"""


def start_nginx(binary: str, root: Path, folder: Path, workers: int) -> Nginx:
    """nginx serving ``root`` (Range requests included) on a free port of 127.0.0.1."""
    folder.mkdir(parents=True, exist_ok=True)

    def start(port: int) -> Nginx:
        conf = folder / "nginx.conf"
        conf.write_text(
            _CONF.format(
                # as root, nginx's workers would be "nobody", who may not read a private folder
                user="user root;" if os.geteuid() == 0 else "",
                workers=workers,
                folder=folder,
                host=LOCALHOST,
                port=port,
                root=root,
            )
        )
        log = folder / "nginx.out"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [binary, "-c", str(conf), "-p", str(folder), "-e", str(folder / "error.log")],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            listening_port(proc, timeout_s=10)  # a socket nginx itself holds: not a stranger
        except RuntimeError:
            proc.kill()
            proc.wait()
            text = log.read_text() + (folder / "error.log").read_text()
            if "Address already in use" in text:
                raise PortTakenError(text) from None
            raise RuntimeError(f"nginx did not start:\n{text}") from None
        return Nginx(proc, f"http://{LOCALHOST}:{port}", folder)

    return start_on_free_port(start)
