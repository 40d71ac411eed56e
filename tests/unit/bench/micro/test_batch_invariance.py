"""The batch-invariance bench refuses bad arguments with a clear message."""

import pytest

from agentserve.bench.micro import batch_invariance

pytestmark = pytest.mark.unit


def test_rounds_below_one_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_info:
        batch_invariance.main(["--rounds", "0"])
    assert exit_info.value.code == 2
    assert "--rounds must be at least 1" in capsys.readouterr().err
