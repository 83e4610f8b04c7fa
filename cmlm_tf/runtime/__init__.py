"""The process and its libraries: TensorFlow's log level and the filter of native stderr lines
(`tf_logs`), the one module that touches private attributes of TensorFlow, Keras, Orbit and
Model Garden (`internals`), and the host CPU, its kernels and thread settings (`host`)."""
