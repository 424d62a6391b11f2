"""Triggers run in the triggerer for the deferrable sensors: they poll a table, holding no worker slot."""
