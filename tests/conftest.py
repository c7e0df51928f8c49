"""Shared pytest configuration for every tier."""
