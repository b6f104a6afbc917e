"""Why a kernel is as fast as it is: the bottleneck class against the roofline, and Nsight Compute
counters for kept kernels where ncu works."""
