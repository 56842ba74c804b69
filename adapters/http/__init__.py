"""HTTP helpers the HTTP upstream kinds share: proxies, TLS contexts, bounded bodies."""
