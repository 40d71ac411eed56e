import pytest

from agentserve.kvstore.readahead import ReadAhead

pytestmark = pytest.mark.unit

MB = 1 << 20


def ids(n: int) -> list[bytes]:
    return [bytes([i]) * 16 for i in range(n)]


def test_keeps_a_window_ahead_and_refills_half_a_window_at_a_time():
    blocks = ids(12)
    ahead = ReadAhead(blocks, lambda b: MB, window_bytes=4 * MB)
    assert ahead.advance(0) == blocks[0:4]
    assert ahead.advance(1) == []  # 3 MB still ahead: more than half the window
    assert ahead.advance(2) == blocks[4:6]  # 2 MB ahead: refilled to the window
    assert ahead.advance(3) == []
    assert ahead.advance(4) == blocks[6:8]
    assert ahead.advance(8) == blocks[8:12]  # the reader overtook the advice: start at the reader
    assert ahead.advance(12) == []


def test_an_absent_block_ends_the_read_ahead():
    blocks = ids(6)
    sizes = {b: MB for b in blocks[:3]}
    ahead = ReadAhead(blocks, sizes.get, window_bytes=8 * MB)
    assert ahead.advance(0) == blocks[:3]
    assert ahead.advance(3) == []


def test_blocks_of_any_size_fill_the_window_by_bytes():
    blocks = ids(5)
    sizes = dict(zip(blocks, (3 * MB, 3 * MB, MB, MB, MB)))
    ahead = ReadAhead(blocks, sizes.get, window_bytes=4 * MB)
    assert ahead.advance(0) == blocks[:2]  # the block that crosses the window is still advised
    assert ahead.advance(1) == []  # 3 MB ahead of 4: not yet half drained
    assert ahead.advance(2) == blocks[2:5]


def test_window_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        ReadAhead(ids(1), lambda b: MB, window_bytes=0)
