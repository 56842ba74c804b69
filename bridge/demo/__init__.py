"""Demo upstreams shipped with the bridge: one local service or program per upstream kind."""
