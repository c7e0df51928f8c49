"""Fakes for every external boundary, shipped with the package (as knftables ships its Fake)."""
