import platform

import pytest

from agentserve.fabric.malloc import keep_freed_buffers

pytestmark = pytest.mark.unit


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt thresholds are glibc's")
def test_thresholds_are_taken_once_per_process():
    assert keep_freed_buffers() is True
    assert keep_freed_buffers() is True  # idempotent
