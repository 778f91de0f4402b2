"""What the gradient samplers share: the chain's fields and checks
(:mod:`core.gradients.chain`), the check of a told gradient
(:mod:`core.gradients.check`), step size and metric warm-up
(:mod:`core.gradients.warmup`) and Hamiltonian dynamics
(:mod:`core.gradients.hamiltonian`).
"""
