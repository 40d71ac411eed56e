"""Where the recorded traces live: the checkout's `traces/` folder (traces/README.md names each
file's source and licence).

The folder sits at the repository root beside `services/`, so it is found from the `agentserve`
package's own location (`services/agentserve/../../traces`). That holds for a source checkout and
its editable install; a wheel installed elsewhere carries no traces, and a reader given one of
these paths there fails naming the path it looked for.
"""

from __future__ import annotations

from pathlib import Path

import agentserve

TRACES_DIR = Path(agentserve.__file__).resolve().parents[2] / "traces"
MOONCAKE_CONVERSATION = TRACES_DIR / "mooncake" / "conversation_trace.jsonl"
TRACELAB_ROUNDS = TRACES_DIR / "tracelab" / "round_trace.jsonl"
