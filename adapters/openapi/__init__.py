"""OpenAPI 3.0/3.1 upstreams: each operation of an API document is a tool."""
