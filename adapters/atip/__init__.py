"""ATIP upstreams: command-line tools that describe themselves with `--agent`."""
