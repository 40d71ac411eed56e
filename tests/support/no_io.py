"""The unit tier's isolation: a unit test opens no socket and starts no process.

`forbid_sockets_and_processes` replaces every entry point to the network and to child processes
with one that raises `IsolationError` and records the attempt, so a test that swallows the error
still fails at teardown. The one socket permitted is an AF_UNIX pair wrapped around descriptors the
kernel already made: asyncio's selector event loop makes such a `socket.socketpair()` as its
self-pipe, and it reaches neither the network nor another process.
"""

from __future__ import annotations

import asyncio
import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
import pytest


class IsolationError(BaseException):
    """Raised where a unit test opens a socket or starts a process. A `BaseException`, so the
    `except Exception` of the code under test does not hide it."""


_ADVICE = (
    "unit tests open no sockets and start no processes: use an in-process fake, or move the test to tests/integration"
)


def forbid_sockets_and_processes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Patches the socket, gRPC, subprocess, multiprocessing and fork entry points until `monkeypatch`
    is undone; returns the list the refused attempts are appended to."""
    attempts: list[str] = []

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            attempts.append(what)
            raise IsolationError(f"{what}: {_ADVICE}")

        return refused

    real_socket_init = socket.socket.__init__

    def socket_init(
        self: socket.socket,
        family: int = -1,
        type: int = -1,
        proto: int = -1,
        fileno: int | None = None,
    ) -> None:
        if family == socket.AF_UNIX and fileno is not None:
            real_socket_init(self, family, type, proto, fileno)
            return
        attempts.append("socket.socket()")
        raise IsolationError(f"socket.socket(family={family}): {_ADVICE}")

    monkeypatch.setattr(socket.socket, "__init__", socket_init)
    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect()"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex()"))
    monkeypatch.setattr(socket.socket, "bind", refuse("socket.bind()"))
    for name in ("server", "insecure_channel", "secure_channel"):
        monkeypatch.setattr(grpc, name, refuse(f"grpc.{name}()"))
        monkeypatch.setattr(grpc.aio, name, refuse(f"grpc.aio.{name}()"))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("subprocess.Popen()"))
    monkeypatch.setattr(asyncio, "create_subprocess_exec", refuse("asyncio.create_subprocess_exec()"))
    monkeypatch.setattr(asyncio, "create_subprocess_shell", refuse("asyncio.create_subprocess_shell()"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse("multiprocessing.Process.start()"))
    for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp"):
        monkeypatch.setattr(os, name, refuse(f"os.{name}()"))
    return attempts
