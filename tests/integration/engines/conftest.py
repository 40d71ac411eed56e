"""Real engine processes shared by this package's tests: a kvstore, two prefill engines (the second
with layerwise prefill and compute-quota batching) and two decode engines (the second one cold for
path-B relays), no scheduler."""

from __future__ import annotations

import pytest

from tests.support.processes import free_port, start_service, wait_serving


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    kv_port, prefill_port, layerwise_port, decode_port, decode2_port, scheduler_port = (free_port() for _ in range(6))
    data_dir = tmp_path_factory.mktemp("kv")
    kv = start_service(
        "kvstore", "agentserve.kvstore", ["--grpc-port", str(kv_port), "--data-dir", str(data_dir)], kv_port
    )
    # No scheduler runs here: the engines' registration retries quietly, which must not matter, and
    # no scheduler registers the decode engines the tests name, so prefills dial them unlisted.
    common = [
        "--peer-allowlist",
        "false",
        "--advertise-host",
        "127.0.0.1",
        "--scheduler-address",
        f"127.0.0.1:{scheduler_port}",
        "--kvstore-address",
        kv.address,
    ]
    procs = [kv]
    try:
        # Layer by layer from the store, though the tiny model's layers are below the default read size.
        layerwise = ["--layerwise", "true", "--layerwise-min-read-kb", "0"]
        layerwise += ["--prefill-batching", "compute-quota", "--prefill-token-budget", "4096"]
        for name, module, port, extra in (
            ("prefill", "agentserve.prefill", prefill_port, []),
            ("prefill-layerwise", "agentserve.prefill", layerwise_port, layerwise),
            ("decode", "agentserve.decode", decode_port, []),
            ("decode2", "agentserve.decode", decode2_port, []),
        ):
            args = ["--grpc-port", str(port), *common, *extra]
            procs.append(start_service(name, module, args, port, wait=False))
        for proc in procs[1:]:
            wait_serving(proc.address, 180, proc.proc, proc.log)
        yield {proc.name: proc for proc in procs}
    finally:
        for proc in procs:
            proc.stop()
