"""Text into ids: TF-Text's ops registered (`text_ops`), Hugging Face's BERT normalisation as
TF-Text's normaliser table (`bert_normalizer`), text to token ids (`tokenization`), token ids to
encoder inputs and the TF Hub preprocessor (`packing`), and sentences sorted by length into
batches (`batching`)."""
