"""Pure projections between Agent Tool records and wire formats (A2T, MCP, provider function formats)."""
