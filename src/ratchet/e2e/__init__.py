"""End to end: the workloads kernels plug into (built-in Llama- and DeepSeek-style decoders; ``models``: any
MODEL, transformers models through the adapter, module:function), profiling a model's step, extracting
task files from it, the gate that puts a kept kernel into the model, the stack that measures layer by
layer, the step-timing protocol, the campaign of ``ratchet optimize`` and the package of
``ratchet export``."""
