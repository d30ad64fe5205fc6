"""Renderers: pure functions from a ``Report`` to text. None of them gathers or judges."""
