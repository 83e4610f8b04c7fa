"""Training losses shared by the cmlm_tf objectives."""
