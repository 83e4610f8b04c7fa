"""`--sentence_transformers`: `OUT/sentence_transformers/`, the model as a
sentence-transformers folder that `SentenceTransformer(path)` loads without cmlm_tf
(`cmlm_tf.export.sentence_transformers_folder`)."""

from cmlm_tf.export import staging
from cmlm_tf.export.export_metadata import SENTENCE_TRANSFORMERS_FOLDER as FOLDER
from cmlm_tf.export.formats.base import ExportFormat, WriteContext


def check(model, flag: str) -> None:
    from cmlm_tf.export import sentence_transformers_folder as st_folder

    st_folder.check_representable(model, flag)


def write(context: WriteContext) -> None:
    from cmlm_tf.export import sentence_transformers_folder as st_folder

    context.stage("writing the sentence-transformers folder")
    with staging.writing(context.export_dir, FOLDER):
        context.meta["sentence_transformers"] = st_folder.write_folder(
            context.path(FOLDER), context.encoder, context.model, context.seq_length,
            card_lines=context.card_description, dim=context.encoder.output_dim)


def card_rows(meta: dict) -> str:
    folder = meta.get("sentence_transformers")
    if not folder:
        return ""
    return (f"| `{folder['folder']}/` | sentence-transformers, Transformers: "
            f"`SentenceTransformer(path)` ({', '.join(folder['modules'])}) | none |\n")


FORMAT = ExportFormat(
    name="sentence_transformers", write=write, check=check,
    outputs=(f"{FOLDER}/modules.json", f"{FOLDER}/model.safetensors"), card_rows=card_rows,
    help="also write OUT/sentence_transformers/: the model as a sentence-transformers "
         "folder (SentenceTransformer(path))")
