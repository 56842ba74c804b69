"""A2A upstreams: each skill of an agent card is a tool."""
