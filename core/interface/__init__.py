"""What a sampler is and how its state is kept: the interface every sampler implements
(:mod:`core.interface.sampler`), its options (:mod:`core.interface.options`), the codec
of its states (:mod:`core.interface.codec`), what a chain costs in memory
(:mod:`core.interface.memory`) and the defaults every surface shares
(:mod:`core.interface.defaults`).
"""
