r"""Broken inputs on the import surface, one at a time, and what each gives.

    python benchmarks/import_faults.py [--work_dir DIR]

Each case damages a copy of a good input and runs the command a user would run on it, in
this process: `python -m cmlm_tf.import_model` on a broken Hugging Face / sentence-
transformers folder (the WordPiece and XLM-R stand-ins of tests/testdata/st_standins) or on
something that is not an importable model, or `python -m cmlm_tf.export --model_dir` on a
damaged import folder. The outcome of each:

- `ok`: exit 0 and the same import (checkpoint tensors and model config) as the intact
  input gives, where the damage does not matter;
- `clear`: exit 2 with one `error:` line naming the file (and the field) at fault;
- `unnamed`: exit 2, but the line does not name what is at fault;
- `traceback`: any other exit, or a traceback;
- `silent wrong`: exit 0 where the input should have been refused, or an import that
  differs from the intact one;
- `lost`: an existing folder that the command should have left alone was changed.

Prints a table of the cases and the count of each outcome; exits 1 unless every case is
`ok` or `clear` (outcomes and table: benchmarks/fault_runs.py).
tests/test_import_faults.py runs the same cases.
"""

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loaded by path in tests

import fault_runs  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
STANDINS = REPO / "tests" / "testdata" / "st_standins"
WORDPIECE = STANDINS / "st6_bert_mean"
SENTENCEPIECE = STANDINS / "xlmr_layout"


def _json_edit(name, change):
    """Damage: `change(data)` applied to the JSON file `name` (returns the new content)."""
    def damage(folder):
        path = folder / name
        data = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(change(data)), encoding="utf-8")
    return damage


def _set(name, key, value):
    return _json_edit(name, lambda data: {**data, key: value})


def _write(name, content):
    def damage(folder):
        (folder / name).write_bytes(content)
    return damage


def _remove(name):
    def damage(folder):
        os.remove(folder / name)
    return damage


def _truncate(name, keep=0.5):
    def damage(folder):
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[:int(len(data) * keep)])
    return damage


def _halve_lines(name):
    def damage(folder):
        lines = (folder / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / name).write_text("".join(lines[:len(lines) // 2]), encoding="utf-8")
    return damage


def _data_file(folder):
    return next(folder.glob("encoder.data-*"))


# (name, source, damage, expected): source "wordpiece" / "sentencepiece" (an HF folder,
# imported), "import" (an import folder, exported); expected "ok" or the text the error
# line must hold (the file at fault, and the field where there is one).
HF_CASES = [
    ("config.json missing", "wordpiece", _remove("config.json"), "config.json"),
    ("config.json not JSON", "wordpiece", _write("config.json", b"{not json"), "config.json"),
    ("config.json a list", "wordpiece", _write("config.json", b"[1, 2]"), "config.json"),
    ("config.json not UTF-8", "wordpiece", _write("config.json", b'{"a": "\xff"}'),
     "config.json"),
    ("hidden_size a string", "wordpiece", _set("config.json", "hidden_size", "32"),
     "hidden_size"),
    ("hidden_size negative", "wordpiece", _set("config.json", "hidden_size", -32),
     "hidden_size"),
    ("heads do not divide hidden_size", "wordpiece",
     _set("config.json", "num_attention_heads", 5), "num_attention_heads"),
    ("num_hidden_layers 0", "wordpiece", _set("config.json", "num_hidden_layers", 0),
     "num_hidden_layers"),
    ("num_hidden_layers above the weights'", "wordpiece",
     _set("config.json", "num_hidden_layers", 3), "model.safetensors"),
    ("vocab_size unlike the vocabulary", "wordpiece", _set("config.json", "vocab_size", 2999),
     "vocab_size"),
    ("model_type gpt2", "wordpiece", _set("config.json", "model_type", "gpt2"), "model_type"),
    ("hidden_act unknown", "wordpiece", _set("config.json", "hidden_act", "mish2"),
     "hidden_act"),
    ("layer_norm_eps a string", "wordpiece", _set("config.json", "layer_norm_eps", "small"),
     "layer_norm_eps"),
    ("max_position_embeddings 0", "wordpiece",
     _set("config.json", "max_position_embeddings", 0), "max_position_embeddings"),
    ("max_seq_length above the positions", "wordpiece",
     _set("sentence_bert_config.json", "max_seq_length", 1000), "max_seq_length"),
    ("max_seq_length not a number", "wordpiece",
     _set("sentence_bert_config.json", "max_seq_length", "abc"), "max_seq_length"),
    ("modules.json not JSON", "wordpiece", _write("modules.json", b"[{"), "modules.json"),
    ("modules.json names a missing module", "wordpiece",
     _json_edit("modules.json", lambda m: m + [{"idx": 3, "name": "3", "path": "3_Dense",
                                                "type": "sentence_transformers.models.Dense"}]),
     "modules.json"),
    ("pooling mode unknown", "wordpiece",
     _write("1_Pooling/config.json", b'{"word_embedding_dimension": 32, '
                                     b'"pooling_mode": "median"}'), "pooling_mode"),
    ("model.safetensors missing", "wordpiece", _remove("model.safetensors"),
     "model.safetensors"),
    ("model.safetensors truncated", "wordpiece", _truncate("model.safetensors"),
     "model.safetensors"),
    ("model.safetensors empty", "wordpiece", _write("model.safetensors", b""),
     "model.safetensors"),
    ("tokenizer.json missing", "wordpiece", _remove("tokenizer.json"), "tokenizer"),
    ("tokenizer.json not JSON", "wordpiece", _write("tokenizer.json", b"{"), "tokenizer.json"),
    ("tokenizer_config.json not JSON", "wordpiece", _write("tokenizer_config.json", b"{"),
     "tokenizer_config.json"),
    ("do_lower_case a string", "wordpiece",
     _set("tokenizer_config.json", "do_lower_case", "yes"), "do_lower_case"),
    ("an extra file", "wordpiece", _write("notes.txt", b"downloaded on Monday"), "ok"),
    ("a README changed", "wordpiece", _write("README.md", b"# another card"), "ok"),
    ("sentencepiece.bpe.model missing", "sentencepiece", _remove("sentencepiece.bpe.model"),
     "sentencepiece.bpe.model"),
    ("sentencepiece.bpe.model not a model", "sentencepiece",
     _write("sentencepiece.bpe.model", b"not a sentencepiece model"),
     "sentencepiece.bpe.model"),
]

IMPORT_FOLDER_CASES = [
    ("import: vocab.txt cut short", "import", _halve_lines("vocab.txt"), "vocab.txt"),
    ("import: vocab.txt missing", "import", _remove("vocab.txt"), "vocab.txt"),
    ("import: source.json missing", "import", _remove("source.json"), "source.json"),
    ("import: source.json not JSON", "import", _write("source.json", b"{"), "source.json"),
    ("import: encoder.index missing", "import", _remove("encoder.index"), "encoder"),
    ("import: checkpoint data truncated", "import",
     lambda folder: _data_file(folder).write_bytes(_data_file(folder).read_bytes()[:100]),
     "encoder"),
    ("import: warm_start.yaml not YAML", "import", _write("warm_start.yaml", b"task: [\n"),
     "warm_start.yaml"),
    ("import: warm_start.yaml missing", "import", _remove("warm_start.yaml"),
     "warm_start.yaml"),
]


def _tensors(prefix):
    import numpy as np
    import tensorflow as tf

    # BERT's tanh pooler is not imported (sentence encoders do not use it): it keeps its
    # random initial values, as does the object graph's bookkeeping.
    reader = tf.train.load_checkpoint(prefix)
    return {name: np.asarray(reader.get_tensor(name))
            for name in reader.get_variable_to_shape_map()
            if "_pooler_layer" not in name and name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def _same_import(folder, reference) -> bool:
    import numpy as np
    import yaml

    def model(path):
        with open(path / "warm_start.yaml", encoding="utf-8") as f:
            return yaml.safe_load(f)["task"]["model"]

    ours, theirs = _tensors(str(folder / "encoder")), _tensors(str(reference / "encoder"))
    return model(folder) == model(reference) and ours.keys() == theirs.keys() and all(
        np.array_equal(ours[name], theirs[name]) for name in ours)


def _surface_cases(work, references, tiny_export):
    """Cases that are not a damaged copy: where the command points, and what is there."""
    from cmlm_tf.commands import import_model

    def import_into(source, out, *flags):
        return fault_runs.run(import_model.main, ["--import_dir", str(source),
                                                  "--output_dir", str(out), *flags])

    def existing_import():
        out = pathlib.Path(tempfile.mkdtemp(dir=work)) / "existing_import"
        shutil.copytree(references["wordpiece"], out)
        return out

    def existing_export():
        out = pathlib.Path(tempfile.mkdtemp(dir=work)) / "existing_export"
        shutil.copytree(tiny_export, out)
        return out

    cases = [
        ("--import_dir missing", lambda: (import_into(work / "no_such_model", work / "o1"),
                                          None), "no_such_model"),
        ("--import_dir a file", lambda: (import_into(WORDPIECE / "config.json", work / "o2"),
                                         None), "config.json"),
        ("--import_dir an empty folder", lambda: (
            import_into(pathlib.Path(tempfile.mkdtemp(dir=work)), work / "o3"), None),
         "not a model"),
        ("--import_dir a cmlm_tf export", lambda: (import_into(tiny_export, work / "o4"),
                                                   None), "cmlm_tf export"),
        ("--import_dir an export's serving/1", lambda: (
            import_into(tiny_export / "serving" / "1", work / "o5"), None), "cmlm_tf export"),
        ("--import_dir an import folder", lambda: (
            import_into(references["wordpiece"], work / "o6"), None),
         "already an import folder"),
    ]
    if tiny_export is None:
        cases = [case for case in cases if "export" not in case[0]]

    def refused_over(make, *flags):
        def run():
            out = make()
            before = fault_runs.listing(out)
            result = import_into(WORDPIECE, out, *flags)
            return result, (out, before)
        return run

    cases += [
        ("--output_dir an import, no --overwrite", refused_over(existing_import),
         "--overwrite"),
    ]
    if tiny_export is not None:
        cases += [
            ("--output_dir an export, no --overwrite", refused_over(existing_export),
             "not an import folder"),
            ("--output_dir an export, --overwrite", refused_over(existing_export,
                                                                 "--overwrite"),
             "not an import folder"),
        ]
    return cases


def run_cases(work_dir, tiny_export=None):
    """Runs every case under `work_dir`; returns [(name, outcome, error line or "")].
    `tiny_export` (a cmlm_tf export) adds the cases that point the import at one."""
    from cmlm_tf.commands import export as export_cli
    from cmlm_tf.commands import import_model
    from cmlm_tf.model_import import importer

    work = pathlib.Path(work_dir)
    references = {}
    for kind, source in (("wordpiece", WORDPIECE), ("sentencepiece", SENTENCEPIECE)):
        references[kind] = work / f"reference_{kind}"
        if not references[kind].exists():
            importer.convert(str(source), str(references[kind]))
    results = []
    for index, (name, kind, damage, expected) in enumerate(HF_CASES + IMPORT_FOLDER_CASES):
        case = work / f"case{index:02d}"
        if kind == "import":
            shutil.copytree(references["wordpiece"], case / "model")
            damage(case / "model")
            rc, err = fault_runs.run(export_cli.main, ["--model_dir", str(case / "model"),
                                                       "--export_dir", str(case / "export")])
            outcome = fault_runs.outcome(rc, err, expected)
            if outcome == "clear" and (case / "export").exists():
                outcome = "silent wrong"
        else:
            shutil.copytree(WORDPIECE if kind == "wordpiece" else SENTENCEPIECE, case / "hf")
            damage(case / "hf")
            rc, err = fault_runs.run(import_model.main, ["--import_dir", str(case / "hf"),
                                                         "--output_dir", str(case / "out")])
            outcome = fault_runs.outcome(rc, err, expected)
            if outcome == "ok" and not _same_import(case / "out", references[kind]):
                outcome = "silent wrong"
        results.append((name, outcome, fault_runs.last_error(err)))
    for name, run, expected in _surface_cases(work, references, tiny_export):
        (rc, err), kept = run()
        outcome = fault_runs.outcome(rc, err, expected)
        if kept is not None and fault_runs.listing(kept[0]) != kept[1]:
            outcome = "lost"
        results.append((name, outcome, fault_runs.last_error(err)))
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", help="where to write the cases (default: a temporary "
                                           "folder, removed afterwards)")
    args = parser.parse_args()
    return fault_runs.run_in_work_folder(args.work_dir, "import_faults-", run_cases)


if __name__ == "__main__":
    sys.exit(main())
