"""OpenAI-compatible HTTP front of the scheduler (`/v1/chat/completions`, `/v1/completions`, `/v1/models`)."""

from agentserve.scheduler.http.app import build_app, start_http

__all__ = ["build_app", "start_http"]
