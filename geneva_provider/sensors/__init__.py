"""Sensors that wait for a Lance table to change or a column to be filled (deferrable by default)."""
