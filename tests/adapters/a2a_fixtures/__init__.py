"""A2A agents built with a2a-sdk for the A2A adapter tests."""
