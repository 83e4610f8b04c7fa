"""The shapes and dtypes every function of `serving/1` accepts: each input either gives the
declared output shape or raises a clean error, and none kills the process.

The cases run in a child process (`tests.export.children.serving_cases`; a segfault there
fails the case, not pytest): one child per export, restarted after the case that killed it,
if any, for the cases left.
"""

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import subprocess_env

# Case name -> (Python expression over the loaded SavedModel `m`, `tf` and `np`;
# the expected outcome: an output shape, or a regular expression the error must match).
IDS = "tf.constant([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]])"
MASK = "tf.constant([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])"
TYPES = "tf.zeros([2, 5], tf.int32)"
SERVING = "m.signatures['serving_default']"
FROM_IDS = "m.signatures['from_token_ids']"
SENTENCES_SHAPE = r"tensor sentences \S+ is not compatible with expected shape \[\?\]"
IDS_SHAPE = r"tensor input_\w+ \S+ is not compatible with expected shape \[\?,\?\]"
SAME_SHAPE = r"input_(mask|type_ids) must have the shape of input_word_ids"
BINDING = r"Can not cast TensorSpec"


def ids_call(function: str, ids: str = IDS, mask: str = MASK, types: str = TYPES) -> str:
    return f"{function}(input_word_ids={ids}, input_mask={mask}, input_type_ids={types})"


CASES = {
    # serving_default: strings [batch].
    "serving_default/batch": (f"{SERVING}(sentences=tf.constant(['a dog', 'the man']))",
                              {"embeddings": [2, 32]}),
    "serving_default/empty": (f"{SERVING}(sentences=tf.constant([], tf.string))",
                              {"embeddings": [0, 32]}),
    "serving_default/scalar": (f"{SERVING}(sentences=tf.constant('A man'))", SENTENCES_SHAPE),
    "serving_default/2d": (f"{SERVING}(sentences=tf.constant([['a', 'b'], ['c', 'd']]))",
                           SENTENCES_SHAPE),
    "serving_default/2d_one_row": (f"{SERVING}(sentences=tf.constant([['a dog', 'b']]))",
                                   SENTENCES_SHAPE),
    "serving_default/3d": (f"{SERVING}(sentences=tf.constant([[['a']]]))", SENTENCES_SHAPE),
    "serving_default/int32": (f"{SERVING}(sentences=tf.constant([1, 2]))",
                              "expected to be a string tensor"),
    # The root call (`hub.KerasLayer`): strings [batch] -> [batch, dim].
    "call/batch": ("m(tf.constant(['a dog', 'the man', '']))", [3, 32]),
    "call/scalar": ("m(tf.constant('A man'))", BINDING),
    "call/2d": ("m(tf.constant([['a', 'b'], ['c', 'd']]))", BINDING),
    # tokenize: strings [batch] -> token ids [batch, longest].
    "tokenize/batch": ("m.tokenize(tf.constant(['a dog', 'the']))",
                       {"input_word_ids": [2, 4], "input_mask": [2, 4],
                        "input_type_ids": [2, 4]}),
    "tokenize/scalar": ("m.tokenize(tf.constant('A man'))", BINDING),
    "tokenize/2d": ("m.tokenize(tf.constant([['a', 'b']]))", BINDING),
    # from_token_ids: three int32 [batch, seq] of one shape.
    "from_token_ids/batch": (ids_call(FROM_IDS), {"embeddings": [2, 32]}),
    "from_token_ids/no_rows": (ids_call(FROM_IDS, *["tf.zeros([0, 5], tf.int32)"] * 3),
                               {"embeddings": [0, 32]}),
    "from_token_ids/1d": (ids_call(FROM_IDS, *["tf.constant([2, 3])"] * 3), IDS_SHAPE),
    "from_token_ids/3d": (ids_call(FROM_IDS, *["tf.ones([1, 2, 3], tf.int32)"] * 3),
                          IDS_SHAPE),
    "from_token_ids/1d_mask": (ids_call(FROM_IDS, mask="tf.constant([1, 1])"), IDS_SHAPE),
    "from_token_ids/longer_mask": (ids_call(FROM_IDS, mask="tf.ones([2, 6], tf.int32)"),
                                   SAME_SHAPE),
    "from_token_ids/broadcast_types": (ids_call(FROM_IDS, types="tf.zeros([1, 1], tf.int32)"),
                                       SAME_SHAPE),
    "from_token_ids/fewer_rows": (ids_call(FROM_IDS, mask="tf.ones([1, 5], tf.int32)"),
                                  SAME_SHAPE),
    "from_token_ids/int64": (ids_call(FROM_IDS, *[f"tf.cast({x}, tf.int64)"
                                                  for x in (IDS, MASK, TYPES)]),
                             "expected to be a int32 tensor"),
    "from_token_ids/float": (ids_call(FROM_IDS, ids=f"tf.cast({IDS}, tf.float32)"),
                             "expected to be a int32 tensor"),
    "from_token_ids/id_too_large": (ids_call(FROM_IDS, ids="tf.fill([2, 5], 3000)"),
                                    r"input_word_ids has an id outside \[0, \d+\)"),
    "from_token_ids/negative_id": (ids_call(FROM_IDS, ids="tf.fill([2, 5], -1)"),
                                   r"input_word_ids has an id outside \[0, \d+\)"),
    "from_token_ids/type_id_too_large": (ids_call(FROM_IDS, types="tf.fill([2, 5], 2)"),
                                         r"input_type_ids has an id outside \[0, 2\)"),
    "from_token_ids/too_long": (ids_call(FROM_IDS, *["tf.ones([1, 65], tf.int32)"] * 3),
                                "longer than the 64 positions"),
    # pooled_float32 / pooled_bfloat16 (what `cmlm_tf.load().encode` runs): the same ids.
    **{f"pooled_{precision}/{case}": (f"m.pooled_{precision}({args})", expected)
       for precision in ("float32", "bfloat16")
       for case, args, expected in (
           ("batch", f"{IDS}, {MASK}, {TYPES}", [2, 32]),
           ("longer_mask", f"{IDS}, tf.ones([2, 6], tf.int32), {TYPES}", SAME_SHAPE),
           ("id_too_large", f"tf.fill([2, 5], 3000), {MASK}, {TYPES}",
            "input_word_ids has an id outside"),
           ("1d", "tf.constant([2, 3]), tf.constant([1, 1]), tf.constant([0, 0])", BINDING),
           ("int64", f"tf.cast({IDS}, tf.int64), {MASK}, {TYPES}", BINDING))},
}

def run_cases(saved_model_dir, cases: dict) -> dict:
    """Runs `cases` (name -> expression) in child processes; returns name -> result, where a
    case that killed its child gets `{"crashed": exit status}` and the rest run again."""
    results, left = {}, dict(cases)
    while left:
        child = subprocess.run([sys.executable, "-m", "tests.export.children", "serving_cases",
                                str(saved_model_dir), json.dumps(left)],
                               capture_output=True, text=True, env=subprocess_env(),
                               timeout=3600)
        for line in child.stdout.splitlines():
            if line.startswith("{"):
                results.update(json.loads(line))
        left = {name: expression for name, expression in left.items() if name not in results}
        if left:
            if child.returncode == 0:
                raise AssertionError(f"the child skipped {sorted(left)}: {child.stderr[-2000:]}")
            first = next(iter(left))
            results[first] = {"crashed": child.returncode, "stderr": child.stderr[-1000:]}
            del left[first]
    return results


@pytest.fixture(scope="module")
def tiny_results(tiny_export):
    return run_cases(tiny_export / "serving" / "1",
                     {name: expression for name, (expression, _) in CASES.items()})


def check(result: dict, expected) -> None:
    assert "crashed" not in result, f"the process died (exit {result['crashed']}): {result}"
    if isinstance(expected, str):
        assert result.get("error") in ("InvalidArgumentError", "TypeError", "ValueError"), \
            result
        assert re.search(expected, result["message"]), result["message"][:1000]
    else:
        assert "error" not in result, result["message"][:1000]
        assert result["shape"] == expected and not result["nan"], result


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_input_gives_the_declared_shape_or_a_clean_error(tiny_results, case):
    check(tiny_results[case], CASES[case][1])


def test_minilm_serving_refuses_a_scalar_string(minilm_export):
    """The real export, whose tokenizer kernel segfaulted on a scalar string."""
    results = run_cases(minilm_export / "serving" / "1", {
        "scalar": CASES["serving_default/scalar"][0],
        "2d": CASES["serving_default/2d"][0]})
    check(results["scalar"], SENTENCES_SHAPE)
    check(results["2d"], SENTENCES_SHAPE)
