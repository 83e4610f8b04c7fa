"""The op census of a compiled program (`cmlm_tf.training.op_census`): it counts the ops
of an HLO module's text that run serially or draw random numbers."""

import tensorflow as tf

from cmlm_tf.training import op_census


def test_counts_the_sort_of_a_compiled_function_and_nothing_else():
    x = tf.constant([3.0, 1.0, 2.0])
    sort = tf.function(lambda v: tf.sort(v) * 2.0, jit_compile=True)
    hlo = sort.experimental_get_compiler_ir(x)(stage="hlo")
    assert op_census.op_census(hlo) == {"sort": 1, "while": 0, "rng": 0, "rng-bit-generator": 0}


def test_counts_root_and_unnamed_ops_by_their_name():
    hlo = "\n".join(["  %a.1 = f32[3] sort(f32[3] %p), dimensions={0}",
                     "  ROOT %w = (s32[]) while((s32[]) %t), condition=%c, body=%b",
                     "  %r = u32[2] rng-bit-generator(u64[2] %s)",
                     "  %n = f32[3] add(f32[3] %sorted, f32[3] %sorted)"])
    assert op_census.op_census(hlo) == {"sort": 1, "while": 1, "rng": 0, "rng-bit-generator": 1}
