"""Removing secrets (always) and identities (``--anonymize``) from everything the doctor writes."""
