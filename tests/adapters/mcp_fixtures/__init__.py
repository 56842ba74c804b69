"""MCP servers written with the mcp SDK, run by the MCP adapter tests."""
