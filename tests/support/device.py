"""The device the engine parity tests run their engines on: `AGENTSERVE_TEST_DEVICE` (cpu when
unset, as in CI). `scripts/gpu_check.sh` sets it to cuda to run the same tests on a GPU."""

from __future__ import annotations

import os

TEST_DEVICE = os.environ.get("AGENTSERVE_TEST_DEVICE", "cpu")
