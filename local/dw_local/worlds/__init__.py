"""Worlds the local servers serve: data, a generator and a Coalesce project for each."""
