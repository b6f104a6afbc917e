"""The built-in tasks: one folder each, with ``task.py`` (reference, input maker, shapes, tolerances, cost
model; it imports only the public task API, ``ratchet.task``) and ``seeds/``, the candidates a run starts
from (Triton and CUDA C++ for the GPU, plain torch or C++ for the CPU)."""
