"""The SSD-backed KV block store service: `store` (the logic), `servicer` (gRPC), `client`."""
