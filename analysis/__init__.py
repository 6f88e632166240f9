"""Analysis of a results folder: loading, curves, statistics and tables."""
