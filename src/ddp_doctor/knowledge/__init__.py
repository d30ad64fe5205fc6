"""Real-world tables (versions, limits, error texts), each with the source it came from."""
