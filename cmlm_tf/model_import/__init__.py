"""Importing sentence encoders made elsewhere: Hugging Face and sentence-transformers
folders (`hf_folder.py`, `bert_weights.py`, `hf_bert.py`), TF Hub encoders (`hub.py`) and BERT
checkpoints (`checkpoints.py`), told apart by `importer.detect`; `python -m
cmlm_tf.import_model` and `python -m cmlm_tf.convert_hf_bert` are the command lines."""
