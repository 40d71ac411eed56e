"""Every bench's figures are written the same way: Agg backend, laid out, closed after saving."""

import pytest

from agentserve.bench.common.plots import pyplot, saved

pytestmark = pytest.mark.unit


def test_a_saved_figure_is_a_png_at_the_path_and_is_closed(tmp_path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    out = saved(plt, fig, tmp_path / "line.png", dpi=50)
    assert out == tmp_path / "line.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert fig.number not in plt.get_fignums()
    assert plt.get_backend().lower() == "agg"
