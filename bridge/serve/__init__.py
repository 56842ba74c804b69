"""Frontends: A2T REST and MCP over one Starlette app, and MCP over stdio."""
