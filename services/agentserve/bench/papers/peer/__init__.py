"""`agentserve bench peer`: agentserve and llama.cpp's llama-server serve the same GGUF and replay
the same agent trace through the OpenAI completions API, one system at a time."""
