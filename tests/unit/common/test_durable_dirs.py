"""make_durable_dirs: each directory it creates is fsynced into its parent, top down."""

import pytest

from agentserve.common import durable_dirs

pytestmark = pytest.mark.unit


@pytest.fixture
def synced(monkeypatch):
    calls = []
    real = durable_dirs.fsync_dir

    def record(directory):
        calls.append(str(directory))
        real(directory)

    monkeypatch.setattr(durable_dirs, "fsync_dir", record)
    return calls


def test_each_created_level_is_synced_into_its_parent_top_down(tmp_path, synced):
    durable_dirs.make_durable_dirs(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
    assert synced == [str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a" / "b")]


def test_an_existing_directory_still_has_its_parent_synced(tmp_path, synced):
    (tmp_path / "a").mkdir()
    durable_dirs.make_durable_dirs(tmp_path / "a")
    assert synced == [str(tmp_path)]


def test_a_file_in_the_way_is_an_error(tmp_path, synced):
    (tmp_path / "a").write_bytes(b"")
    with pytest.raises(FileExistsError):
        durable_dirs.make_durable_dirs(tmp_path / "a")
    assert synced == []
