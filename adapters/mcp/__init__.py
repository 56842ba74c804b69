"""MCP upstreams: servers over stdio and streamable HTTP, both protocol eras."""
