"""The support bundle: what goes in it and how it is written safely."""
