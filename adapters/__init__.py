"""Upstream adapters, one protocol each; registered by kind in bridge.upstream.KINDS."""
