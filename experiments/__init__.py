"""Reproducing the papers' claims in miniature: recipes, a runner and a report (docs/claims.md)."""
