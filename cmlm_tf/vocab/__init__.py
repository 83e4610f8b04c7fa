"""Vocabulary learning: word counts per language group (`counts.py`), WordPiece
(`wordpiece.py`) and SentencePiece (`sentencepiece.py`); `python -m cmlm_tf.build_vocab` is
the command line over them."""
