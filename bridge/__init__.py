"""Tool federation bridge: upstream tools of every protocol, one catalog, served over A2T REST and MCP."""

__version__ = "0.1.0"
