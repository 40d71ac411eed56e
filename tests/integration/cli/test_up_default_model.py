"""`agentserve up --local` with no `--model`: SmolLM2-135M-Instruct serves, says so at start, and
answers a chat request rendered by the chat template from its GGUF file."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agentserve.engine.model_catalog import smollm2_file

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 300.0
READY = re.compile(r"agentserve: ready\. OpenAI (http://127\.0\.0\.1:\d+/v1) ")


def wait_ready(popen: subprocess.Popen, stderr: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = READY.search(stderr.read_text())
        if found:
            return found.group(1)
        assert popen.poll() is None, f"up exited ({popen.returncode}): {stderr.read_text()}"
        time.sleep(0.2)
    raise AssertionError(f"not ready within {START_TIMEOUT_S:.0f}s: {stderr.read_text()}")


def test_up_serves_smollm2_by_default_and_answers_in_its_chat_template(tmp_path: Path) -> None:
    stderr = tmp_path / "up.stderr"
    cmd = [sys.executable, "-m", "agentserve.cli.main", "up", "--local", "--free-ports", "--decoders", "1"]
    cmd += ["--data-dir", str(tmp_path / "kv"), "--log-dir", str(tmp_path / "logs")]
    with stderr.open("w") as err:
        popen = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        base = wait_ready(popen, stderr)
        assert stderr.read_text().splitlines()[0] == (
            f"agentserve: model SmolLM2-135M-Instruct from {smollm2_file()}: 30 layers, hidden 576, "
            "vocabulary 49152, served in fp32"
        )
        with urllib.request.urlopen(f"{base}/models", timeout=30) as response:
            assert [m["id"] for m in json.loads(response.read())["data"]] == ["SmolLM2-135M-Instruct"]
        body = {
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 32,
            "temperature": 0,
        }
        request = urllib.request.Request(
            f"{base}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.loads(response.read())
        assert reply["model"] == "SmolLM2-135M-Instruct"
        # Greedy, in the template's `<|im_start|>user ... <|im_start|>assistant` turns: the answer,
        # ended by the model's end-of-turn token.
        assert reply["choices"][0]["message"]["content"] == "The capital of France is Paris."
        assert reply["choices"][0]["finish_reason"] == "stop"
        # The template's own system turn ("You are a helpful AI assistant named SmolLM, trained by
        # Hugging Face") and the question, each between <|im_start|> and <|im_end|>: 37 tokens.
        assert reply["usage"]["prompt_tokens"] == 37
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGTERM)
            popen.wait(60)
