"""The policy file: a team's requirements, loaded, measured and applied to a Report."""
