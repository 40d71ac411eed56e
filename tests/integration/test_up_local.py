"""`agentserve up --local` as a real process tree: a service that dies is restarted with backoff and
serves again, and the parent stopped by SIGTERM or SIGKILL at any phase (warm-up included) leaves
no service running and no port bound."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agentserve.cluster.readiness import http_health

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 240.0
PORT_FLAGS = ("--grpc-port", "--http-port", "--metrics-port")


class UpLocal:
    """`agentserve up --local --free-ports` in its own session, with its stderr in a file."""

    def __init__(self, tmp_path: Path, decoders: int = 1) -> None:
        self.stderr_path = tmp_path / "up.stderr"
        self.log_dir = tmp_path / "logs"
        # The tiny model: what is tested here is the process tree, and it starts in seconds.
        cmd = [sys.executable, "-m", "agentserve.cli.main", "up", "--local", "--model", "tiny", "--free-ports"]
        cmd += ["--decoders", str(decoders), "--data-dir", str(tmp_path / "kv"), "--log-dir", str(self.log_dir)]
        with self.stderr_path.open("w") as stderr:
            self.popen = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def children(self) -> dict[int, list[str]]:
        """pid -> command line of every live process whose parent is `up`."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().decode().split("\0")
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.popen.pid:
                found[int(entry.name)] = cmdline
        return found

    def wait_for(self, predicate, what: str, timeout_s: float = START_TIMEOUT_S):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            assert self.popen.poll() is None, f"up exited ({self.popen.returncode}) waiting for {what}: {self.stderr}"
            time.sleep(0.1)
        raise AssertionError(f"no {what} within {timeout_s:.0f}s: {self.stderr}")

    def kill_tree(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


@pytest.fixture
def up(tmp_path):
    running = UpLocal(tmp_path)
    try:
        yield running
    finally:
        running.kill_tree()


def _service(cmdline: list[str]) -> str:
    return cmdline[cmdline.index("-m") + 1] if "-m" in cmdline else ""


def _ports(children: dict[int, list[str]]) -> set[int]:
    return {int(cmd[i + 1]) for cmd in children.values() for i, arg in enumerate(cmd) if arg in PORT_FLAGS}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie holds no port; its new parent reaps it


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the services bind
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _assert_all_gone(children: dict[int, list[str]], timeout_s: float = 60.0) -> None:
    ports = _ports(children)
    assert ports, children
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [pid for pid in children if _alive(pid)]
        bound = [port for port in ports if not _bindable(port)]
        if not alive and not bound:
            return
        time.sleep(0.2)
    raise AssertionError(f"left behind: processes {alive}, ports {bound}")


def _warming_up(up: UpLocal) -> dict[int, list[str]]:
    """The children once the engines were started, before anything is ready."""
    children = up.wait_for(
        lambda: (
            (c := up.children()) and {"agentserve.prefill", "agentserve.decode"} <= set(map(_service, c.values())) and c
        ),
        "engines started",
    )
    assert "agentserve: ready" not in up.stderr
    return children


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_during_warm_up_leaves_no_process_and_no_port(up, sig):
    children = _warming_up(up)
    # The tool proxy is started right after the engines (they warm up in parallel), so it may or
    # may not have exec'd yet: every other service has.
    services = set(map(_service, children.values()))
    assert services - {"agentserve.toolproxy"} == {
        "agentserve.kvstore",
        "agentserve.scheduler",
        "agentserve.prefill",
        "agentserve.decode",
    }
    up.popen.send_signal(sig)
    code = up.popen.wait(timeout=60)
    if sig == signal.SIGTERM:
        assert code == 128 + signal.SIGTERM
        assert "stopped by SIGTERM while starting; every service stopped" in up.stderr
    else:
        assert code == -signal.SIGKILL
    _assert_all_gone(children)


def test_a_dead_service_is_restarted_and_sigterm_stops_everything(up):
    ready = up.wait_for(lambda: re.search(r"OpenAI http://127\.0\.0\.1:(\d+)/v1", up.stderr), "ready line")
    http_port = int(ready.group(1))
    assert "loopback only, no API keys" in up.stderr
    decode = next(pid for pid, cmd in up.children().items() if _service(cmd) == "agentserve.decode")
    os.kill(decode, signal.SIGKILL)
    up.wait_for(lambda: "decode-0 exited (-9); restarting it in 1 s" in up.stderr, "restart notice", 30)
    restarted = up.wait_for(
        lambda: [p for p, c in up.children().items() if _service(c) == "agentserve.decode" and p != decode],
        "a new decode engine",
        30,
    )
    scheduler_log = up.log_dir / "scheduler.log"
    up.wait_for(lambda: scheduler_log.read_text().count("registered decode engine") == 2, "re-registration", 120)
    assert http_health(http_port)[0] == 200
    body = json.dumps({"prompt": "x", "max_tokens": 3, "ignore_eos": True}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert json.loads(reply.read())["usage"]["completion_tokens"] == 3
    assert f"decode-0 restarted (pid {restarted[0]})" in up.stderr
    children = up.children()
    up.popen.send_signal(signal.SIGTERM)
    assert up.popen.wait(timeout=60) == 0
    _assert_all_gone(children)
