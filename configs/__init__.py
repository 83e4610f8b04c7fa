"""Recipes: YAML files that override a registered experiment (paper sizes, tiny versions,
ablations). Installed with cmlm_tf as the package `cmlm_tf.recipes`, so
`--config_file=cmlm_tiny` finds `cmlm_tiny.yaml` from any directory."""
