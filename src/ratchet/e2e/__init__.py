"""End to end: the workloads kernels plug into (built-in Llama- and DeepSeek-style decoders and the
transformers adapter), profiling a workload's step, extracting task files from it, the gate that puts a
kept kernel into the model, the stack that measures layer by layer, and the step-timing protocol."""
