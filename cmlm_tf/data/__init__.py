"""Files to batched dicts. Tokenisation goes through `cmlm_tf.text.tokenization`."""
