"""`agentserve bench fabric` is wired to the fabric benchmark."""

import pytest

from agentserve.cli import commands
from agentserve.cli.main import build_parser

pytestmark = pytest.mark.unit


def test_bench_fabric_parses():
    args = build_parser().parse_args(
        ["bench", "fabric", "--json", "--duration", "0.5", "--repeats", "1", "--profile", "h800-node"]
    )
    assert (args.func, args.duration, args.repeats, args.chunk_kb, args.profile, args.json) == (
        commands.bench_fabric,
        0.5,
        1,
        1024,
        "h800-node",
        True,
    )
