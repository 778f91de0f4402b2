"""The kernel samplers' surrogates: Gaussian kernels (:mod:`core.kernels.rkhs`), kernel
exponential families fitted by score matching (:mod:`core.kernels.score_matching`), the
kernel HMC chains built on them (:mod:`core.kernels.kernel_hmc`) and the kernel adaptive
Metropolis-Hastings proposal (:mod:`core.kernels.kamh_proposal`).
"""
