"""A2T REST upstreams: other A2T tool servers (IETF draft and a2t dialect)."""
