"""Real engine processes shared by this package's tests: a kvstore, one prefill engine and two
decode engines (the second one cold for path-B relays), no scheduler."""

from __future__ import annotations

import pytest

from tests.support.processes import free_port, start_service, wait_serving


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    kv_port, prefill_port, decode_port, decode2_port, scheduler_port = (free_port() for _ in range(5))
    data_dir = tmp_path_factory.mktemp("kv")
    kv = start_service(
        "kvstore", "agentserve.kvstore", ["--grpc-port", str(kv_port), "--data-dir", str(data_dir)], kv_port
    )
    # No scheduler runs here: the engines' registration retries quietly, which must not matter.
    common = [
        "--advertise-host",
        "127.0.0.1",
        "--scheduler-address",
        f"127.0.0.1:{scheduler_port}",
        "--kvstore-address",
        kv.address,
    ]
    procs = [kv]
    try:
        for name, module, port in (
            ("prefill", "agentserve.prefill", prefill_port),
            ("decode", "agentserve.decode", decode_port),
            ("decode2", "agentserve.decode", decode2_port),
        ):
            procs.append(start_service(name, module, ["--grpc-port", str(port), *common], port, wait=False))
        for proc in procs[1:]:
            wait_serving(proc.address, 180, proc.proc, proc.log)
        yield {proc.name: proc for proc in procs}
    finally:
        for proc in procs:
            proc.stop()
