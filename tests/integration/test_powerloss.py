"""Simulated power cuts under the real kvstore and session database (`agentserve bench powerloss`):
nothing acknowledged is lost, nothing torn is readable, and a planted bug is caught."""

import pytest

from agentserve.bench.micro.powerloss import WINDOWS, PowerlossConfig, run

pytestmark = pytest.mark.integration


def test_20_power_cuts_under_kvstore_writers_lose_no_acknowledged_block():
    result = run(PowerlossConfig(trials=20, target="kvstore"))
    assert result["acknowledged_lost"] == 0 and result["torn_readable"] == 0, result["problems"]
    assert result["crashes_per_window"] == {w: 5 for w in WINDOWS}, result
    assert result["acknowledged_checked"] >= 200 and result["persistence_modes"] == {"lose": 10, "torn": 10}


def test_20_power_cuts_under_the_session_database_lose_no_acknowledged_turn():
    result = run(PowerlossConfig(trials=20, target="sessions"))
    assert result["acknowledged_lost"] == 0 and result["torn_readable"] == 0, result["problems"]
    # SQLite's WAL renames nothing: the trials fall in the other three windows.
    assert result["crashes_per_window"] == {"after_write": 7, "after_fsync": 7, "after_rename": 0, "after_dir_fsync": 6}
    assert result["next_turn_checked"] >= result["acknowledged_checked"] > 0 and result["next_turn_differs"] == 0


@pytest.mark.parametrize("target", ["kvstore", "sessions"])
def test_the_harness_catches_directory_fsyncs_dropped(target):
    result = run(PowerlossConfig(trials=8, target=target, plant="no-dir-fsync"))
    assert result["acknowledged_lost"] > 0, result
    assert result["crashes_per_window"]["after_dir_fsync"] == 0  # the planted bug leaves none


def test_with_file_fsyncs_dropped_torn_blocks_land_under_their_names_and_are_refused():
    result = run(PowerlossConfig(trials=8, target="kvstore", plant="no-file-fsync"))
    assert result["acknowledged_lost"] > 0 and result["torn_refused"] > 0, result
    assert result["torn_readable"] == 0, result["problems"]
