"""Exporters that turn a cmlm_tf checkpoint into SavedModels."""
