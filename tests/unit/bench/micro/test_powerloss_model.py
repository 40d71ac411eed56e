"""The power-loss persistence model: exact durable states after hand-written logs."""

import os
import random
import struct

import pytest

from agentserve.bench.micro.powerloss import PowerlossConfig, crash_points, windows_of
from agentserve.bench.micro.powerloss_log import OPEN_CREATED, OPEN_DIRECTORY, Kind, Op, parse
from agentserve.bench.micro.powerloss_model import ReplayError, materialize, replay

pytestmark = pytest.mark.unit

CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL


def create(fd, path):
    return Op(Kind.OPEN, fd, CREATE, OPEN_CREATED, path)


def open_dir(fd, path="."):
    return Op(Kind.OPEN, fd, os.O_RDONLY | os.O_DIRECTORY, OPEN_DIRECTORY, path)


def write(fd, data, offset=0):
    return Op(Kind.WRITE, fd, offset, data=data)


def fsync(fd):
    return Op(Kind.FSYNC, fd)


def close(fd):
    return Op(Kind.CLOSE, fd)


def rename(src, dst):
    return Op(Kind.RENAME, path=src, path2=dst)


def dir_fsync(path="."):
    return [open_dir(9, path), fsync(9), close(9)]


# The store's protocol for one block: temp file written and synced, renamed, directory synced.
STAGED = [create(3, "x.tmp"), write(3, b"hello"), fsync(3), close(3)]


def test_a_created_file_is_lost_until_its_directory_is_synced():
    assert replay(STAGED) == {}
    assert replay(STAGED + dir_fsync()) == {"x.tmp": b"hello"}


def test_file_data_not_synced_is_lost_even_under_a_durable_entry():
    ops = [create(3, "x"), write(3, b"hello"), close(3), *dir_fsync()]
    assert replay(ops) == {"x": b""}
    assert replay([*ops, Op(Kind.OPEN, 3, os.O_WRONLY, 0, "x"), fsync(3)]) == {"x": b"hello"}


def test_a_rename_is_durable_only_after_the_directory_fsync():
    synced_tmp = STAGED + dir_fsync()
    assert replay([*synced_tmp, rename("x.tmp", "x")]) == {"x.tmp": b"hello"}
    assert replay([*synced_tmp, rename("x.tmp", "x"), *dir_fsync()]) == {"x": b"hello"}
    # Renamed before its entry was ever durable: nothing until the fsync, then the final name only.
    assert replay([*STAGED, rename("x.tmp", "x")]) == {}
    assert replay([*STAGED, rename("x.tmp", "x"), *dir_fsync()]) == {"x": b"hello"}


def test_a_new_directory_needs_its_parent_synced_too():
    inside = [
        Op(Kind.MKDIR, path="a"),
        create(3, "a/x"),
        write(3, b"kv"),
        fsync(3),
        close(3),
        *dir_fsync("a"),
    ]
    assert replay(inside) == {}
    assert replay([*inside, *dir_fsync(".")]) == {"a": {"x": b"kv"}}


def test_unlinks_and_truncations_not_synced_are_undone():
    durable = [create(3, "x"), write(3, b"hello"), fsync(3), close(3), *dir_fsync()]
    assert replay([*durable, Op(Kind.UNLINK, path="x")]) == {"x": b"hello"}
    assert replay([*durable, Op(Kind.UNLINK, path="x"), *dir_fsync()]) == {}
    truncated = [*durable, Op(Kind.OPEN, 4, os.O_WRONLY | os.O_TRUNC, 0, "x"), write(4, b"yo")]
    assert replay(truncated) == {"x": b"hello"}
    assert replay([*truncated, fsync(4)]) == {"x": b"yo"}
    assert replay([*durable, Op(Kind.OPEN, 4, os.O_WRONLY, 0, "x"), Op(Kind.TRUNC, 4, 2), fsync(4)]) == {"x": b"he"}


def test_sync_makes_everything_durable_and_writes_land_at_their_offsets():
    ops = [
        Op(Kind.MKDIR, path="a"),
        create(3, "a/x"),
        write(3, b"hello"),
        write(3, b"J", offset=0),
        write(3, b"!", offset=7),
        Op(Kind.SYNCALL),
    ]
    assert replay(ops) == {"a": {"x": b"Jello\x00\x00!"}}


def test_descriptors_are_reused_after_close():
    ops = [create(3, "x"), write(3, b"1"), close(3), create(3, "y"), write(3, b"2"), Op(Kind.SYNCALL)]
    assert replay(ops) == {"x": b"1", "y": b"2"}


def test_a_call_on_something_the_log_never_opened_is_an_error():
    with pytest.raises(ReplayError, match="fd 5 was never opened"):
        replay([write(5, b"x")])
    with pytest.raises(ReplayError, match="never created"):
        replay([Op(Kind.OPEN, 3, os.O_RDONLY, 0, "missing")])


def test_torn_mode_keeps_a_byte_prefix_of_the_pending_writes():
    ops = [create(3, "x"), *dir_fsync(), write(3, b"abc"), write(3, b"def", offset=3)]
    seen = {replay(ops, random.Random(seed))["x"] for seed in range(300)}
    assert seen == {b"abcdef"[:n] for n in range(7)}


def test_torn_mode_keeps_a_rename_within_a_directory_atomic():
    ops = [*STAGED, *dir_fsync(), rename("x.tmp", "x")]
    seen = {tuple(replay(ops, random.Random(seed)).items()) for seed in range(100)}
    assert seen == {(("x.tmp", b"hello"),), (("x", b"hello"),)}


def test_materialize_writes_the_tree(tmp_path):
    materialize({"a": {"x": b"kv", "e": {}}, "y": b""}, tmp_path)
    assert (tmp_path / "a" / "x").read_bytes() == b"kv"
    assert (tmp_path / "a" / "e").is_dir() and (tmp_path / "y").read_bytes() == b""


def test_windows_name_the_last_durability_step_before_each_crash_point():
    ops = [*STAGED, rename("x.tmp", "x"), *dir_fsync(), Op(Kind.MARK, path="ack x")]
    assert windows_of(ops) == [
        None,  # before anything
        None,  # after the temp file's open
        "after_write",
        "after_fsync",
        "after_fsync",  # its close
        "after_rename",
        "after_rename",  # the directory's open
        "after_dir_fsync",
        "after_dir_fsync",
        "after_dir_fsync",  # the ack
    ]
    group = [*STAGED[:2], Op(Kind.SYNCALL), rename("x.tmp", "x"), Op(Kind.SYNCALL)]
    assert windows_of(group)[3:] == ["after_fsync", "after_rename", "after_dir_fsync"]


def test_crash_points_take_the_windows_in_turn():
    windows = windows_of([*STAGED, rename("x.tmp", "x"), *dir_fsync()])
    points = crash_points(windows, 8, random.Random(0))
    assert [w for _, w in points] == ["after_write", "after_fsync", "after_rename", "after_dir_fsync"] * 2
    assert all(windows[k] == w for k, w in points)


def test_the_log_parses_what_the_recorder_writes():
    header = struct.Struct("<B3xiqqIIQ")
    raw = header.pack(Kind.RENAME, -1, 0, 0, 5, 5, 0) + b"/r/ab/r/cd"
    raw += header.pack(Kind.WRITE, 4, 7, 0, 0, 0, 3) + b"xyz"
    assert parse(raw) == [Op(Kind.RENAME, -1, 0, 0, "/r/ab", "/r/cd"), Op(Kind.WRITE, 4, 7, 0, data=b"xyz")]
    with pytest.raises(ValueError, match="truncated in a record body"):
        parse(raw[:-1])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"trials": 0}, "trials must be at least 1"),
        ({"target": "redis"}, "target must be one of kvstore, sessions"),
        ({"plant": "no-sync"}, "plant must be one of no-dir-fsync, no-file-fsync"),
    ],
)
def test_a_bad_setting_is_named(fields, message):
    with pytest.raises(ValueError, match=message):
        PowerlossConfig(**fields)
