"""What every bench's PNG plots share: pyplot on the file-only Agg backend, imported only when a
bench plots (matplotlib is the optional `bench` extra), and one way to write a figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """`matplotlib.pyplot` on the Agg backend (no display needed); ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def saved(plt: Any, fig: Any, out: Path, dpi: int = 120) -> Path:
    """Write `fig` to `out` laid out at `dpi` and close it (pyplot keeps open figures alive otherwise)."""
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out
