"""The plain-sentence reader (`cmlm_tf.data.sentences`): blank and malformed lines, order,
resuming, and the packed batches."""

import collections

import pytest

from cmlm_tf import configs
from cmlm_tf.data import sentences
from tests.conftest import write_byte_lines


def test_blank_lines_are_skipped_and_malformed_ones_reported(tmp_path):
    path = write_byte_lines(tmp_path / "text.txt", [
        b"the dog is running",
        b"",
        b"  \t ",
        b"bad \xff utf8",
        b" a cat \r",
        b"the dog is running",
    ])
    stats = sentences.scan_sentences([path])
    assert (stats.records, stats.sentences, stats.blank, stats.malformed) == (6, 3, 2, 1)
    reports = []
    read = sentences.read_sentences([path], is_training=False,
                                    field="task.train_data.input_path", reports=reports)
    assert [s.decode() for s in read.as_numpy_iterator()] == [
        "the dog is running", "a cat", "the dog is running"]
    (report,) = reports
    assert report.count == 1 and report.field == "task.train_data.input_path"
    assert report.examples == [f"{path} line 4: field 1 is not valid UTF-8"]


def test_a_corpus_without_a_sentence_is_an_error_naming_the_field(tmp_path):
    path = write_byte_lines(tmp_path / "empty.txt", [b"", b"\xff\xfe", b"   "])
    with pytest.raises(ValueError, match=r"task.train_data.input_path: .*empty.txt holds no "
                                         r"valid sentence \(3 lines, 1 malformed; first: "
                                         r"field 1 is not valid UTF-8\)"):
        sentences.sentences_dataset(
            sentences.SentencesDataConfig(input_path=path, global_batch_size=2),
            configs.TokenizerConfig())
    with pytest.raises(FileNotFoundError, match="task.train_data.input_path"):
        sentences.sentence_files(sentences.SentencesDataConfig(
            input_path=str(tmp_path / "missing*.txt")))


def test_training_shuffles_with_the_seed_and_keeps_every_sentence(tmp_path):
    path = write_byte_lines(tmp_path / "text.txt",
                            [f"sentence {n}".encode() for n in range(40)] + [b""])

    def drawn(seed):
        read = sentences.read_sentences([path], is_training=True, shuffle_buffer_size=10,
                                        seed=seed)
        return [s.decode() for s in read.take(400).as_numpy_iterator()]

    first = drawn(5)
    assert first == drawn(5) and first != drawn(6)
    assert first[:40] != [f"sentence {n}" for n in range(40)]
    counts = collections.Counter(first)
    assert set(counts) == {f"sentence {n}" for n in range(40)}
    assert set(counts.values()) <= {9, 10, 11}


def test_batches_are_packed_single_sentences_and_resume_where_they_stopped(tmp_path,
                                                                           tiny_vocab):
    path = write_byte_lines(tmp_path / "text.txt", [
        b"the dog", b"The dog ", b"a red car", b"", b"the cat is eating an onion",
        b"hello world", b"a man", b"a woman", b"a child"])
    tokenizer = configs.TokenizerConfig(vocab_file=str(tiny_vocab))
    evaluation = sentences.SentencesDataConfig(input_path=path, global_batch_size=4,
                                               seq_length=6, is_training=False,
                                               drop_remainder=True)
    batches = list(sentences.sentences_dataset(evaluation, tokenizer).as_numpy_iterator())
    assert len(batches) == 2
    batch = batches[0]
    assert set(batch) == {"sentence", "sentence_id"}
    assert {k: v.shape for k, v in batch["sentence"].items()} == {
        "input_word_ids": (4, 6), "input_mask": (4, 6), "input_type_ids": (4, 6)}
    vocab = tiny_vocab.read_text().split()
    ids = [vocab[i] for i in batch["sentence"]["input_word_ids"][0]]
    assert ids == ["[CLS]", "the", "dog", "[SEP]", "[PAD]", "[PAD]"]
    # Truncated to seq_length, [SEP] kept.
    assert batch["sentence"]["input_mask"][3].tolist() == [1] * 6
    assert vocab[batch["sentence"]["input_word_ids"][3][-1]] == "[SEP]"
    assert not batch["sentence"]["input_type_ids"].any()
    # Lower-cased tokenizer: "the dog" and "The dog " are one sentence, one fingerprint.
    assert batch["sentence_id"][0] == batch["sentence_id"][1] != batch["sentence_id"][2]

    training = sentences.SentencesDataConfig(input_path=path, global_batch_size=2,
                                             seq_length=6, is_training=True, seed=1,
                                             shuffle_buffer_size=4)
    straight = list(sentences.sentences_dataset(training, tokenizer).take(5))
    resumed = list(sentences.sentences_dataset(training, tokenizer, resume_step=3).take(2))
    for expected, batch in zip(straight[3:], resumed):
        assert (expected["sentence_id"].numpy() == batch["sentence_id"].numpy()).all()
