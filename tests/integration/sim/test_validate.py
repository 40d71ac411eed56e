"""`agentserve sim validate` end to end on its smallest configuration: the same agents run on the
emulated cluster (`bench dualpath`, one policy's cluster at a time) and in the simulator agree
within the issue's error on JCT and throughput (0.10) and on p90 latencies (0.15), and the two
rank the policies alike.

The configuration keeps modelled time far above what the processes themselves take: a time
dilation of 30 (a later turn's read and compute ~4 s local) against the per-turn gRPC and Python
work, one prefill and one decode engine, two agents of four turns, the baseline and dualpath."""

from __future__ import annotations

import json

import pytest

from agentserve.sim.validate import CHECKS, run_checks

pytestmark = pytest.mark.integration


# Two clusters started one after another and served alone: past the tier's 600 s on a loaded machine.
@pytest.mark.timeout(1500)
def test_the_smallest_config_agrees_emulated_and_simulated(tmp_path):
    result = run_checks(("smoke",), tmp_path, "baseline,dualpath")
    check = result["configs"]["smoke"]
    detail = json.dumps(check["policies"], indent=1)
    assert set(check["policies"]) == {"baseline", "dualpath"}
    assert check["max_rel_error"] <= check["bounds"]["max_rel_error"], detail
    assert check["max_rel_error_p90"] <= check["bounds"]["max_rel_error_p90"], detail
    assert check["ranking_agrees"], detail
    assert (tmp_path / "smoke" / "dualpath.json").is_file()
    assert CHECKS["smoke"].bench_args  # the configuration the docs name
