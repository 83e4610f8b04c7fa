"""Writes udhr_wordpiece_golden.json.gz: Hugging Face's WordPiece ids of every UDHR paragraph.

Run in a separate virtual environment with `transformers` (never a dependency of cmlm_tf):

    python tests/testdata/make_udhr_wordpiece_golden.py ../shared/data/udhr MINILM_DIR/vocab.txt

For each vocabulary (the bundled `cmlm_tf/data/corpus/vocab.txt` and all-MiniLM-L6-v2's,
both uncased) and each UDHR file (`<code>.txt` and `preamble/<code>.txt`), it stores the
number of ids and a SHA-256 of the ids, one line per paragraph (`ids_digest` below), as
`transformers.BertTokenizer(vocab=vocab_file, do_lower_case=True)` gives them without special
tokens. The test tokenises the same files and compares the digests.
"""

import gzip
import hashlib
import json
import os
import sys


def ids_digest(lines_of_ids) -> str:
    text = "\n".join(" ".join(str(i) for i in ids) for ids in lines_of_ids)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def udhr_files(udhr_dir):
    names = sorted(n for n in os.listdir(udhr_dir) if n.endswith(".txt"))
    preamble = os.path.join(udhr_dir, "preamble")
    names += sorted("preamble/" + n for n in os.listdir(preamble) if n.endswith(".txt"))
    return names


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def main(udhr_dir, minilm_vocab):
    from transformers import BertTokenizer

    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "..", "..", "cmlm_tf", "data", "corpus", "vocab.txt")
    result = {"tokenizer": f"transformers {__import__('transformers').__version__} "
                           "BertTokenizer(do_lower_case=True), no special tokens",
              "vocabularies": {}}
    files = udhr_files(udhr_dir)
    for name, vocab in (("bundled", bundled), ("minilm", minilm_vocab)):
        tokenizer = BertTokenizer(vocab=vocab, do_lower_case=True)
        assert len(tokenizer) == sum(1 for _ in open(vocab, encoding="utf-8")), vocab
        entries = {}
        for file_name in files:
            lines = read_lines(os.path.join(udhr_dir, file_name))
            ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
            entries[file_name] = [sum(len(row) for row in ids), ids_digest(ids)]
        result["vocabularies"][name] = entries
    out = os.path.join(here, "udhr_wordpiece_golden.json.gz")
    with gzip.open(out, "wt", encoding="utf-8") as f:
        json.dump(result, f, sort_keys=True)
    print(out, os.path.getsize(out), "bytes,", len(files), "files")


if __name__ == "__main__":
    main(*sys.argv[1:])
